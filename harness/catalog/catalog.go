// Package catalog reads model limits from the AI Gateway's public models
// catalog (GET https://ai-gateway.vercel.sh/v1/models, no key needed) or
// from a local JSON file in the same format, and caches them.
//
// The format is an OpenAI-style model list:
//
//	{"object": "list", "data": [{"id": "anthropic/claude-sonnet-4.5",
//	  "type": "language", "context_window": 200000, "max_tokens": 64000,
//	  "name": ..., "owned_by": ..., "tags": [...], "pricing": {...}}]}
//
// context_window is the model's context in tokens and max_tokens its
// maximum output tokens. Catalogs in the OpenRouter shape (context_length,
// top_provider.max_completion_tokens) are read too. Other fields are
// ignored.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// DefaultURL is the AI Gateway's public models catalog.
const DefaultURL = "https://ai-gateway.vercel.sh/v1/models"

// maxCatalogBytes bounds a catalog read.
const maxCatalogBytes = 32 << 20

// Model is what the catalog says about one model.
type Model struct {
	// ID is the model ID, "provider/model" for the Gateway.
	ID string
	// Type is the catalog's model type ("language", "embedding",
	// "image", ...), "" when the catalog has none.
	Type string
	// ContextWindow is the context size in tokens, 0 when unknown.
	ContextWindow int64
	// MaxOutputTokens is the maximum output in tokens, 0 when unknown.
	MaxOutputTokens int64
}

// Catalog is a catalog's models by ID.
type Catalog map[string]Model

// ErrFormat is returned for a document that is not a models catalog.
var ErrFormat = errors.New("catalog: not a models catalog")

// tokens is a token count as catalogs write it: a JSON number (integer or
// not), a numeric string, or null.
type tokens int64

// UnmarshalJSON implements json.Unmarshaler.
func (t *tokens) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*t = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(strings.TrimSpace(s))
		if len(b) == 0 {
			*t = 0
			return nil
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0 || f > 1e15 {
		return fmt.Errorf("not a token count: %s", b)
	}
	*t = tokens(f)
	return nil
}

type wireModel struct {
	ID            string  `json:"id"`
	Type          string  `json:"type"`
	ContextWindow *tokens `json:"context_window"`
	MaxTokens     *tokens `json:"max_tokens"`
	ContextLength *tokens `json:"context_length"`
	TopProvider   *struct {
		ContextLength       *tokens `json:"context_length"`
		MaxCompletionTokens *tokens `json:"max_completion_tokens"`
	} `json:"top_provider"`
}

// Parse decodes a catalog document. An entry whose fields do not decode
// is skipped rather than failing the whole catalog; a document without a
// data array is ErrFormat.
func Parse(data []byte) (Catalog, error) {
	var doc struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if doc.Data == nil {
		return nil, fmt.Errorf("%w: no data array", ErrFormat)
	}
	out := make(Catalog, len(doc.Data))
	for _, raw := range doc.Data {
		var w wireModel
		if json.Unmarshal(raw, &w) != nil || w.ID == "" {
			continue
		}
		m := Model{ID: w.ID, Type: w.Type}
		switch {
		case w.ContextWindow != nil:
			m.ContextWindow = int64(*w.ContextWindow)
		case w.ContextLength != nil:
			m.ContextWindow = int64(*w.ContextLength)
		case w.TopProvider != nil && w.TopProvider.ContextLength != nil:
			m.ContextWindow = int64(*w.TopProvider.ContextLength)
		}
		switch {
		case w.MaxTokens != nil:
			m.MaxOutputTokens = int64(*w.MaxTokens)
		case w.TopProvider != nil && w.TopProvider.MaxCompletionTokens != nil:
			m.MaxOutputTokens = int64(*w.TopProvider.MaxCompletionTokens)
		}
		if _, dup := out[m.ID]; !dup {
			out[m.ID] = m
		}
	}
	return out, nil
}

// Load reads a catalog from a local JSON file.
func Load(path string) (Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCatalogBytes+1))
	if err != nil {
		return nil, fmt.Errorf("catalog: reading %s: %w", path, err)
	}
	if len(data) > maxCatalogBytes {
		return nil, fmt.Errorf("catalog: %s is larger than %d bytes", path, maxCatalogBytes)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}

// Fetch reads a catalog: an http(s) URL with http.DefaultClient, or a
// local file given as a file: URL or a path.
func Fetch(ctx context.Context, source string) (Catalog, error) {
	return fetch(ctx, http.DefaultClient, source)
}

func fetch(ctx context.Context, client *http.Client, source string) (Catalog, error) {
	u, err := url.Parse(source)
	if err != nil || u.Scheme == "" {
		return Load(source)
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		return Load(p)
	case "http", "https":
	default:
		return nil, fmt.Errorf("catalog: unsupported URL scheme %q", u.Scheme)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("catalog: fetching %s: %w", source, ctx.Err())
		}
		return nil, fmt.Errorf("catalog: fetching %s: %w", source, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxCatalogBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("catalog: reading %s: %w", source, ctx.Err())
		}
		return nil, fmt.Errorf("catalog: reading %s: %w", source, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{URL: source, StatusCode: resp.StatusCode}
	}
	if len(data) > maxCatalogBytes {
		return nil, fmt.Errorf("catalog: %s is larger than %d bytes", source, maxCatalogBytes)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, source)
	}
	return c, nil
}

// StatusError is a catalog URL's HTTP error status.
type StatusError struct {
	URL        string
	StatusCode int
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("catalog: %s: HTTP %d", e.URL, e.StatusCode)
}
