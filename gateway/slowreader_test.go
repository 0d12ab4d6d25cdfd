package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

// A client that stops reading its stream holds nothing up: the session's
// turn completes and another client's stream of it ends whole, while the
// stalled stream's writes wait; the node then closes the stalled
// connection once a write has waited WriteTimeout, and the stalled client
// never saw the turn's end.
func TestASubscriberThatStopsReadingIsCutOff(t *testing.T) {
	const writeTimeout = 2 * time.Second
	text := strings.Repeat("a long answer ", 600_000) // 8.4 MB, more than the sockets hold
	f := newFixture(t, fmt.Sprintf(`{"replies":[{"text":%q,"chunkSize":16384}]}`, text),
		gateway.Options{WriteTimeout: writeTimeout}, nil)
	u, err := url.Parse(f.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The stalled client: a small receive buffer, a request, then no read.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	stalled, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := fmt.Fprintf(stalled, "GET %ss1/stream?after=0 HTTP/1.1\r\nHost: %s\r\n\r\n", sessionsPath, u.Host); err != nil {
		t.Fatal(err)
	}
	f.push("s1", protocol.Inputs.Text("m1", "tell me everything"))

	// Another client reads the turn to its end.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+sessionsPath+"s1/stream?after=0&until=idle", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the reading client: %d, %v", resp.StatusCode, err)
	}
	if !strings.Contains(string(body), protocol.TypeGenerationCompleted) || len(body) < len(text) {
		t.Fatalf("the reading client's stream is not whole: %d bytes", len(body))
	}
	st, _ := f.state("s1")
	if st.Active != nil || st.Status != protocol.StatusIdle {
		t.Fatalf("the turn did not complete: status %s", st.Status)
	}

	// Its next write has waited its WriteTimeout by now (the stalled stream
	// blocked on full buffers long before the turn ended): the stalled
	// client reads what the sockets held, then the end of a connection the
	// node closed, without the turn's end. Had the node not closed it, the
	// reads would unblock its writes and get the whole turn, then wait.
	time.Sleep(2 * writeTimeout)
	if err := stalled.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(bufio.NewReader(stalled))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the node did not close the stalled connection (%d bytes read)", len(got))
	}
	if strings.Contains(string(got), protocol.TypeGenerationCompleted) {
		t.Fatalf("the stalled client got the whole turn (%d bytes): the sockets held it, the test proves nothing", len(got))
	}
	t.Logf("the stalled client got %d bytes of the %d-byte stream before the node closed it", len(got), len(body))
	if !strings.HasPrefix(string(got), "HTTP/1.1 200") {
		t.Fatalf("the stalled client's answer starts %q", string(got[:min(len(got), 40)]))
	}
}
