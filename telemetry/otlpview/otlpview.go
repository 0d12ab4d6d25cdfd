// Package otlpview is a small OTLP/HTTP trace receiver that keeps what
// nodes export and renders a trace as an indented tree: the viewer of
// cmd/tracetree, and what the multi-process telemetry test reads. It
// accepts POST /v1/traces with a protobuf ExportTraceServiceRequest (the
// OTLP exporters' http/protobuf protocol, uncompressed or gzip), and
// accepts and drops metrics and logs.
package otlpview

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as a node exported it.
type Span struct {
	Service, Instance string
	Trace, ID, Parent string
	Name              string
	Start, End        time.Time
	Attrs             map[string]string
	Links             int
	// Writes are the span's a2.store.append events: the store writes it
	// caused, each with its batch size and log indexes.
	Writes []map[string]string
	Error  string // the status message of a failed span
}

// Receiver keeps the spans it is sent. Its zero value is ready; serve it
// as an http.Handler.
type Receiver struct {
	mu    sync.Mutex
	spans []Span
	// OnSpans, when set, is called (outside the lock) after each export.
	OnSpans func()
}

// maxBody bounds one export request.
const maxBody = 64 << 20

// ServeHTTP implements http.Handler.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "this receiver takes POST /v1/traces (OTLP/HTTP, protobuf)", http.StatusMethodNotAllowed)
		return
	}
	switch req.URL.Path {
	case "/v1/traces":
	case "/v1/metrics", "/v1/logs":
		// Accepted and dropped, so that a node exporting every signal to
		// the same endpoint does not log failures: an empty body is an
		// empty export response.
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, req.Body, maxBody))
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	default:
		http.Error(w, "this receiver takes POST /v1/traces (OTLP/HTTP, protobuf)", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(body)
	var msg coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
	if r.OnSpans != nil {
		r.OnSpans()
	}
}

func (r *Receiver) add(msg *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{Service: res["service.name"], Instance: res["service.instance.id"],
					Trace: hex.EncodeToString(s.TraceId), ID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId),
					Name: s.Name, Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
					Attrs: attrs(s.Attributes), Links: len(s.Links)}
				for _, e := range s.Events {
					if e.Name == "a2.store.append" {
						sp.Writes = append(sp.Writes, attrs(e.Attributes))
					}
				}
				if s.Status != nil && s.Status.Code == 2 { // STATUS_CODE_ERROR
					sp.Error = s.Status.Message
					if sp.Error == "" {
						sp.Error = "error"
					}
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = valueString(kv.Value)
	}
	return m
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', 4, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, valueString(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return ""
}

// Trace returns the spans of trace id received so far.
func (r *Receiver) Trace(id string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.Trace == id {
			out = append(out, s)
		}
	}
	return out
}

// Traces returns the IDs of the traces received, oldest first, with their
// span counts.
func (r *Receiver) Traces() (ids []string, counts map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts = map[string]int{}
	for _, s := range r.spans {
		if counts[s.Trace] == 0 {
			ids = append(ids, s.Trace)
		}
		counts[s.Trace]++
	}
	return ids, counts
}

// Named returns the spans whose name is name or starts with name+" ".
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name || strings.HasPrefix(s.Name, name+" ") {
			out = append(out, s)
		}
	}
	return out
}

// Tree renders spans as an indented tree, children in start order, each
// line the span's name, duration, the process it came from, and its
// gen_ai.*, a2.* and http.route attributes (keys matching any of skip
// left out).
func Tree(spans []Span, skip ...string) string {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.ID] = true
	}
	kids := map[string][]Span{}
	var roots []Span
	for _, s := range spans {
		if s.Parent != "" && ids[s.Parent] {
			kids[s.Parent] = append(kids[s.Parent], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func([]Span, int)
	walk = func(ss []Span, depth int) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].Start.Before(ss[j].Start) })
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%s  %s  [%s]", strings.Repeat("  ", depth), s.Name, s.End.Sub(s.Start).Round(10*time.Microsecond), s.Instance)
			keys := make([]string, 0, len(s.Attrs))
			for k := range s.Attrs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
		attr:
			for _, k := range keys {
				if !strings.HasPrefix(k, "gen_ai.") && !strings.HasPrefix(k, "a2.") && k != "http.route" && k != "http.response.status_code" && k != "error.type" {
					continue
				}
				for _, p := range skip {
					if strings.Contains(k, p) {
						continue attr
					}
				}
				fmt.Fprintf(&b, " %s=%s", k, s.Attrs[k])
			}
			if s.Links > 0 {
				fmt.Fprintf(&b, " links=%d", s.Links)
			}
			if len(s.Writes) > 0 {
				var ws []string
				for _, w := range s.Writes {
					ws = append(ws, w["a2.log.index"]+"-"+w["a2.log.index.last"]+" ("+w["a2.store.duration_ms"]+" ms)")
				}
				fmt.Fprintf(&b, " store-writes=[%s]", strings.Join(ws, " "))
			}
			if s.Error != "" {
				fmt.Fprintf(&b, " ERROR=%q", s.Error)
			}
			b.WriteByte('\n')
			walk(kids[s.ID], depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}
