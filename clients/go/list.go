// Listing the held locks (`GET /locks?prefix=&limit=&cursor=`), a page at
// a time.

package lockgate

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// ListOption configures List.
type ListOption func(*listConfig)

type listConfig struct {
	limit  int
	cursor string
}

// PageSize asks for about n locks a page (1 to 1000; 0, the default: the
// gateway's, 100).
func PageSize(n int) ListOption {
	return func(c *listConfig) { c.limit = n }
}

// Cursor starts the listing at the page a LockPage's NextCursor names:
// a pass carried on by another process, or after a restart.
func Cursor(cursor string) ListOption {
	return func(c *listConfig) { c.cursor = cursor }
}

// LockPage is one page of held locks.
type LockPage struct {
	// Locks are the page's held locks, in the order of their keys, each
	// as Inspect shows it.
	Locks []*LockStatus
	// NextCursor is where the next page begins (Cursor); "" on the last.
	NextCursor string

	gw     *Gateway
	prefix string
	limit  int
}

// lockListWire is a page as the gateway sends it.
type lockListWire struct {
	Locks      []lockStatusWire `json:"locks"`
	NextCursor *string          `json:"next_cursor"`
}

// List returns the first page of the held locks whose key starts with
// prefix ("" for every lock), or with Cursor the page it names: `GET
// /locks?prefix=P&limit=N&cursor=C`, across every master of a Redis
// Cluster. Next returns the page after it. A pass from the first page to
// the last lists every lock held all along exactly once, whatever other
// locks come and go meanwhile (those may be listed or not). A page may
// come out short, even empty, and still not be the last: More says. Only
// the locks the caller may read are listed.
//
// An invalid prefix, page size or cursor is an error matching
// ErrInvalidRequest.
func (g *Gateway) List(ctx context.Context, prefix string, options ...ListOption) (*LockPage, error) {
	var cfg listConfig
	for _, option := range options {
		option(&cfg)
	}
	return g.listPage(ctx, prefix, cfg.limit, cfg.cursor)
}

// More reports whether a page follows this one.
func (p *LockPage) More() bool { return p.NextCursor != "" }

// Next returns the page after this one, asked for with the same prefix
// and page size; an error matching ErrInvalidRequest after the last page.
func (p *LockPage) Next(ctx context.Context) (*LockPage, error) {
	if !p.More() {
		return nil, fmt.Errorf("%w: this was the last page", ErrInvalidRequest)
	}
	return p.gw.listPage(ctx, p.prefix, p.limit, p.NextCursor)
}

func (g *Gateway) listPage(ctx context.Context, prefix string, limit int, cursor string) (*LockPage, error) {
	query := url.Values{}
	if prefix != "" {
		query.Set("prefix", prefix)
	}
	if limit != 0 {
		query.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		query.Set("cursor", cursor)
	}
	path := "/locks"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	a, err := g.do(ctx, call{method: http.MethodGet, path: path})
	if err != nil {
		return nil, err
	}
	var wire lockListWire
	if err := decode(a, &wire); err != nil {
		return nil, err
	}
	page := &LockPage{Locks: make([]*LockStatus, 0, len(wire.Locks)), NextCursor: text(wire.NextCursor),
		gw: g, prefix: prefix, limit: limit}
	for _, lock := range wire.Locks {
		page.Locks = append(page.Locks, lock.status())
	}
	return page, nil
}
