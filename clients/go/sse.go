// A Server-Sent Events reader by the WHATWG rules (the `text/event-stream`
// format), for the gateway's streamed locks and lock watches.

package lockgate

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxEventLine bounds one line of an event stream, so that a peer that
// never ends a line cannot make the reader buffer without end.
const maxEventLine = 1 << 20

// errLineTooLong is returned by eventReader.Next for a line over maxEventLine.
var errLineTooLong = errors.New("lockgate: event stream line too long")

// serverEvent is one dispatched event.
type serverEvent struct {
	// Type is the `event` field; "message" when there was none.
	Type string
	// Data is the `data` lines, joined with "\n".
	Data string
	// ID is the stream's last event ID when the event was dispatched: the
	// last `id` field seen so far, in this event or an earlier one.
	ID string
}

// eventReader reads events from a stream as the WHATWG HTML standard's
// "interpreting an event stream" says: lines end in CRLF, LF or CR (split
// anywhere across reads), a leading byte order mark is skipped, comments
// are skipped, `id` persists across events (an `id` holding NUL is
// ignored), `retry` with ASCII digits sets the reconnection time, an event
// with no data is not dispatched, and an event cut off by the stream's end
// is dropped.
type eventReader struct {
	source *bufio.Reader
	// afterCR: the last line ended in CR, so a LF that comes next (in this
	// read or a later one) belongs to that line end.
	afterCR bool
	started bool
	line    []byte

	eventType string
	data      strings.Builder
	hasData   bool
	// idBuffer is the last `id` field read; lastEventID takes its value at
	// each blank line, so an id whose event the stream's end cut off is
	// never reported.
	idBuffer    string
	lastEventID string
	retry       time.Duration
}

func newEventReader(r io.Reader) *eventReader {
	return &eventReader{source: bufio.NewReader(r)}
}

// Next returns the next event, or the error that ended the stream (io.EOF
// when it ended cleanly).
func (r *eventReader) Next() (serverEvent, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return serverEvent{}, err
		}
		if event, ok := r.processLine(line); ok {
			return event, nil
		}
	}
}

// LastEventID is the stream's last event ID: what a reconnection sends as
// `Last-Event-ID`.
func (r *eventReader) LastEventID() string { return r.lastEventID }

// Retry is the reconnection time the stream asked for with `retry`; 0 when
// it did not.
func (r *eventReader) Retry() time.Duration { return r.retry }

// readLine returns the next line without its end. Lines are read a byte at
// a time from the buffer rather than by looking ahead, so that an event
// whose last line ends in a lone CR is dispatched at once rather than when
// the next byte happens to arrive.
func (r *eventReader) readLine() (string, error) {
	r.line = r.line[:0]
	for {
		c, err := r.source.ReadByte()
		if err != nil {
			// A line the stream's end cut short is dropped with its event.
			return "", err
		}
		if r.afterCR {
			r.afterCR = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\r':
			r.afterCR = true
			return r.finishLine(), nil
		case '\n':
			return r.finishLine(), nil
		}
		if len(r.line) >= maxEventLine {
			return "", errLineTooLong
		}
		r.line = append(r.line, c)
	}
}

func (r *eventReader) finishLine() string {
	line := r.line
	if !r.started {
		r.started = true
		line = trimByteOrderMark(line)
	}
	text := string(line)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return text
}

func trimByteOrderMark(line []byte) []byte {
	if len(line) >= 3 && line[0] == 0xEF && line[1] == 0xBB && line[2] == 0xBF {
		return line[3:]
	}
	return line
}

// processLine applies one line; it returns the event a blank line completes.
func (r *eventReader) processLine(line string) (serverEvent, bool) {
	if line == "" {
		return r.dispatch()
	}
	if line[0] == ':' {
		return serverEvent{}, false
	}
	field, value := line, ""
	if colon := strings.IndexByte(line, ':'); colon >= 0 {
		field, value = line[:colon], line[colon+1:]
		value = strings.TrimPrefix(value, " ")
	}
	switch field {
	case "event":
		r.eventType = value
	case "data":
		if r.hasData {
			r.data.WriteByte('\n')
		}
		r.data.WriteString(value)
		r.hasData = true
	case "id":
		if !strings.ContainsRune(value, 0) {
			r.idBuffer = value
		}
	case "retry":
		if isASCIIDigits(value) {
			if ms, err := strconv.ParseInt(value, 10, 64); err == nil && ms <= int64(time.Duration(1<<62)/time.Millisecond) {
				r.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return serverEvent{}, false
}

func (r *eventReader) dispatch() (serverEvent, bool) {
	r.lastEventID = r.idBuffer
	defer func() {
		r.eventType = ""
		r.data.Reset()
		r.hasData = false
	}()
	if !r.hasData {
		return serverEvent{}, false
	}
	event := serverEvent{Type: r.eventType, Data: r.data.String(), ID: r.lastEventID}
	if event.Type == "" {
		event.Type = "message"
	}
	return event, true
}

func isASCIIDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
