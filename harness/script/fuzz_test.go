package script

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// FuzzScript feeds Parse any bytes and streams what it accepts (delays and
// gates left out, which only wait): a script is refused with an error or
// answers a call with chunks that end, never a panic or an endless stream.
func FuzzScript(f *testing.F) {
	for _, s := range []string{
		`{"default":{"text":"hello there"}}`,
		`{"replies":[{"match":"weather","reasoning":"think","text":"sunny","chunkSize":2,"toolCalls":[{"name":"t","input":{"a":1}}],"then":{"text":"done"}}]}`,
		`{"replies":[{"error":"boom","finishReason":"length","usage":{"inputTokens":3}}]}`,
		`{"replies":[{"chunkSize":-3,"text":"x"}],"default":{"toolCalls":[{"id":"c1","name":"","input":null}]}}`,
		`{"default":{"text":"` + "\u00e9\u00e9" + `","chunkSize":1}}`,
		`{"replies":[]}`, `{"nope":1}`, `[`, ``,
	} {
		f.Add([]byte(s), "hello")
	}
	f.Fuzz(func(t *testing.T, data []byte, user string) {
		sc, err := Parse(data)
		if err != nil {
			return
		}
		quiet := func(r *Reply) {
			for ; r != nil; r = r.Then {
				r.DelayMs, r.Gate = 0, ""
			}
		}
		for i := range sc.Replies {
			quiet(&sc.Replies[i])
		}
		quiet(sc.Default)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := harness.Request{SessionID: "s", GenerationID: "g", Messages: []harness.ModelMessage{{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: user}}}}}
		st, err := New(sc).Stream(ctx, req)
		if err != nil {
			return
		}
		defer st.Close()
		for n := 0; ; n++ {
			c, err := st.Next()
			if errors.Is(err, io.EOF) || err != nil {
				return
			}
			if c.Type == "" {
				t.Fatalf("chunk %d has no type", n)
			}
			if n > 1_000_000 {
				t.Fatal("a stream of more than a million chunks")
			}
			_ = protocol.IsBoundaryChunk(c)
		}
	})
}
