// Unit tests of the Server-Sent Events reader against the WHATWG rules.

package lockgate

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// readAll returns every event of the stream and the error that ended it.
func readAll(r io.Reader) ([]serverEvent, *eventReader, error) {
	reader := newEventReader(r)
	var events []serverEvent
	for {
		event, err := reader.Next()
		if err != nil {
			return events, reader, err
		}
		events = append(events, event)
	}
}

// chunked reads text in pieces of the given sizes, then the rest.
type chunked struct {
	text  string
	sizes []int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.text == "" {
		return 0, io.EOF
	}
	n := len(c.text)
	if len(c.sizes) > 0 {
		n, c.sizes = c.sizes[0], c.sizes[1:]
	}
	if n > len(c.text) {
		n = len(c.text)
	}
	n = copy(p[:n], c.text)
	c.text = c.text[n:]
	return n, nil
}

func TestEventStreamFields(t *testing.T) {
	stream := "" +
		": a comment, skipped\n" +
		"event: acquired\n" +
		"data: {\"key\":\"a\"}\n" +
		"id: 1-0\n" +
		"\n" +
		"data:no space\n" +
		"data:  two spaces keep one\n" +
		"data\n" +
		"\n" +
		"event: renewed\n" +
		"unknown: field\n" +
		"data: x\n" +
		"\n"
	events, _, err := readAll(strings.NewReader(stream))
	if !errors.Is(err, io.EOF) {
		t.Fatalf("ended with %v", err)
	}
	want := []serverEvent{
		{Type: "acquired", Data: `{"key":"a"}`, ID: "1-0"},
		// No `event` field: "message". The id persists from the event before.
		{Type: "message", Data: "no space\n two spaces keep one\n", ID: "1-0"},
		{Type: "renewed", Data: "x", ID: "1-0"},
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events\n got %#v\nwant %#v", events, want)
	}
}

func TestEventStreamLineEndsSplitAnywhere(t *testing.T) {
	// The same two events with every kind of line end; read whole, a byte
	// at a time, and cut at every position into two reads.
	streams := map[string]string{
		"LF":   "event: a\ndata: 1\nid: 7\n\ndata: 2\n\n",
		"CRLF": "event: a\r\ndata: 1\r\nid: 7\r\n\r\ndata: 2\r\n\r\n",
		"CR":   "event: a\rdata: 1\rid: 7\r\rdata: 2\r\r",
		"mix":  "event: a\r\ndata: 1\rid: 7\n\r\ndata: 2\r\r\n",
	}
	want := []serverEvent{{Type: "a", Data: "1", ID: "7"}, {Type: "message", Data: "2", ID: "7"}}
	for name, stream := range streams {
		readers := map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(stream) },
			"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(stream)) },
		}
		for cut := 1; cut < len(stream); cut++ {
			cut := cut
			readers[fmt.Sprintf("cut at %d", cut)] = func() io.Reader {
				return &chunked{text: stream, sizes: []int{cut}}
			}
		}
		for how, open := range readers {
			events, _, err := readAll(open())
			if !errors.Is(err, io.EOF) {
				t.Fatalf("%s, %s: ended with %v", name, how, err)
			}
			if !reflect.DeepEqual(events, want) {
				t.Fatalf("%s, %s:\n got %#v\nwant %#v", name, how, events, want)
			}
		}
	}
}

func TestEventStreamDispatchesOnALoneCRAtOnce(t *testing.T) {
	// An event whose blank line is a lone CR must not wait for the next
	// byte (which, on a quiet stream, may be a keep-alive 15 s away).
	r, w := io.Pipe()
	defer w.Close()
	reader := newEventReader(r)
	got := make(chan serverEvent, 1)
	go func() {
		event, err := reader.Next()
		if err == nil {
			got <- event
		}
	}()
	if _, err := w.Write([]byte("data: now\r\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case event := <-got:
		if event.Data != "now" {
			t.Fatalf("got %#v", event)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event waited for a byte after its lone CR")
	}
	// A LF that comes next belongs to that CR: no empty line, no event.
	go func() { _, _ = w.Write([]byte("\ndata: next\n\n")) }()
	event, err := reader.Next()
	if err != nil || event.Data != "next" {
		t.Fatalf("got %#v, %v", event, err)
	}
}

func TestEventStreamIDRules(t *testing.T) {
	stream := "" +
		"id: 1\ndata: a\n\n" +
		// An event without data is not dispatched, but its id counts.
		"id: 2\n\n" +
		"data: b\n\n" +
		// An id holding NUL is ignored.
		"id: 3\x004\ndata: c\n\n" +
		// An empty id resets it.
		"id\ndata: d\n\n" +
		"id: 9\ndata: cut off by the end of the stream"
	events, reader, err := readAll(strings.NewReader(stream))
	if !errors.Is(err, io.EOF) {
		t.Fatalf("ended with %v", err)
	}
	var ids, data []string
	for _, event := range events {
		ids = append(ids, event.ID)
		data = append(data, event.Data)
	}
	if want := []string{"1", "2", "2", ""}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids %q, want %q", ids, want)
	}
	if want := []string{"a", "b", "c", "d"}; !reflect.DeepEqual(data, want) {
		t.Fatalf("data %q, want %q", data, want)
	}
	if reader.LastEventID() != "" {
		t.Fatalf("the id of an event the stream's end cut off was taken: %q", reader.LastEventID())
	}
}

func TestEventStreamRetryAndByteOrderMark(t *testing.T) {
	stream := "\xEF\xBB\xBFretry: 2500\ndata: a\n\nretry: soon\nretry: 1x\ndata: b\n\n"
	events, reader, err := readAll(strings.NewReader(stream))
	if !errors.Is(err, io.EOF) || len(events) != 2 {
		t.Fatalf("got %#v, %v", events, err)
	}
	// Only all-digit values count; the first line's BOM was skipped, so
	// its `retry` field was read.
	if reader.Retry() != 2500*time.Millisecond {
		t.Fatalf("retry %v", reader.Retry())
	}
}

func TestEventStreamInvalidUTF8AndLongLines(t *testing.T) {
	events, _, _ := readAll(strings.NewReader("data: \xff!\n\n"))
	if len(events) != 1 || events[0].Data != "\uFFFD!" {
		t.Fatalf("got %#v", events)
	}
	long := "data: " + strings.Repeat("x", maxEventLine+1) + "\n\n"
	if _, _, err := readAll(strings.NewReader(long)); !errors.Is(err, errLineTooLong) {
		t.Fatalf("a line past the bound ended with %v", err)
	}
}
