package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/bench/loadgen"
)

// The cluster row of the bench suite: the durable 3-step turn at 64
// closed-loop clients over 1,000 sessions against three deployments of
// real node processes, one after the other in one run.
const (
	clusterBenchSessions = 1000
	clusterBenchClients  = 64
	// clusterBenchWarmers warm the sessions before the measured phase:
	// 1,000 / 50, each session exactly one turn.
	clusterBenchWarmers = 50
	// clusterBenchSettle is the pause between the warm-up and the measured
	// phase. A PostgreSQL backend publishes its counts (pg_stat_database)
	// at most once a second, and one that goes idle less than a second
	// after its last report holds the rest until it runs again or 10 s
	// pass (PGSTAT_IDLE_INTERVAL): after this pause the warm-up's
	// transactions are all counted, so none is taken for the measured
	// phase's. Every deployment gets the same pause.
	clusterBenchSettle = 12 * time.Second
	// clusterBenchTurns is the number of measured turns when -benchtime is
	// a duration rather than a count.
	clusterBenchTurns = 3200
)

// BenchmarkClusterTurn runs the durable 3-step turn (turn3Script: a model
// step that calls the calculator tool, the tool, the continuation step)
// over HTTP, each turn one request (a push with stream=1 read to its end,
// bench/loadgen's OneRequest), at 64 closed-loop clients over 1,000
// sessions, against three deployments of the node binary, one after the
// other in the same run:
//
//   - deploy=pebble: a single node on Pebble in a temporary directory;
//   - deploy=postgres: a single node on PostgreSQL;
//   - deploy=cluster: three members and a gateway on PostgreSQL, the load
//     through the gateway.
//
// Each PostgreSQL deployment has a fresh database of its own on the server
// A2_TEST_POSTGRES_URL names (created here, dropped at the end), or, when
// that is not set, on a throwaway server this benchmark starts (initdb and
// pg_ctl of /usr/lib/postgresql/*/bin, on a free loopback port; as the
// postgres user when run as root) and stops; with neither, the PostgreSQL
// deployments are skipped, saying so.
//
// Each deployment first warms every one of the 1,000 sessions with one
// turn (its activation and ownership claim), not measured, pauses
// clusterBenchSettle, then measures b.N turns (-benchtime Nx: N turns,
// rounded up to a multiple of 64; 3,200 with a duration). It reports
// turns/s, the push-to-completion p50 and p99, the CPU per turn of each
// A2 process (node, or m1, m2, m3 and gateway) and their sum (cpu-ms/turn),
// the clients' (this process's) CPU per turn, and for the PostgreSQL
// deployments the deployment's database's committed transactions per turn
// (pg_stat_database.xact_commit, reads included; the nodes are killed after
// the measured phase so that their backends publish their last counts as
// they exit) and the CPU per turn of its backends (the server's processes
// of the deployment's connections, read from /proc: the server runs on this
// machine). The deployments after the Pebble node report each figure's
// ratio to the Pebble node's of the same run (x-pebble-...). A failed turn
// fails the benchmark.
//
//	go test ./cmd/node -run '^$' -bench ClusterTurn -benchtime 6400x
//	go run ./bench -only cluster
func BenchmarkClusterTurn(b *testing.B) {
	nodeBinary(b) // built before the first deployment starts
	script := filepath.Join(b.TempDir(), "turn3.json")
	if err := os.WriteFile(script, []byte(turn3Script), 0o600); err != nil {
		b.Fatal(err)
	}
	pg := &benchPostgres{parent: b}
	var pebble *clusterTurnFigures // the Pebble node's, for the ratios
	for _, deploy := range []string{"pebble", "postgres", "cluster"} {
		b.Run("deploy="+deploy, func(b *testing.B) {
			var admin *pgx.Conn
			var adminURL string
			if deploy != "pebble" {
				admin, adminURL = pg.server(b)
			}
			if probing(b) {
				return
			}
			prefix := map[string]string{"postgres": "a2bench_single", "cluster": "a2bench_cluster"}[deploy]
			d := startBenchDeployment(b, deploy, admin, adminURL, prefix, "--script", script)
			f := d.measure(b)
			if deploy == "pebble" {
				pebble = &f
			} else if pebble != nil {
				b.ReportMetric(f.turnsPerSec/pebble.turnsPerSec, "x-pebble-turns/s")
				b.ReportMetric(f.p50/pebble.p50, "x-pebble-p50")
				b.ReportMetric(f.p99/pebble.p99, "x-pebble-p99")
				b.ReportMetric(f.cpu/pebble.cpu, "x-pebble-cpu")
			}
		})
	}
}

// startBenchDeployment starts a deployment of the node binary: "pebble" (a
// single node), "postgres" (a single node on a fresh database named after
// prefix) or "cluster" (three members on such a database and a gateway),
// each process with args; every process serves Go's profiler on a port of
// its own (benchProc.pprof).
func startBenchDeployment(b *testing.B, deploy string, admin *pgx.Conn, adminURL, prefix string, args ...string) *benchDeployment {
	b.Helper()
	d := &benchDeployment{admin: admin}
	with := func(more ...string) []string { return append(append(more, "--pprof-addr", freePort(b)), args...) }
	// The nodes' logs go to files (launchClusterProc), not into the
	// benchmark's output, where bench/main.go reads its lines.
	switch deploy {
	case "pebble":
		p := startClusterProc(b, "node", "", with("--data", b.TempDir())...)
		d.url = p.url
		d.procs = []benchProc{clusterProcOf(p)}
	case "postgres":
		d.db = benchDatabase(b, admin, adminURL, prefix)
		p := startClusterProc(b, "node", "", with("--store", d.db.url)...)
		d.url = p.url
		d.procs = []benchProc{clusterProcOf(p)}
	case "cluster":
		d.db = benchDatabase(b, admin, adminURL, prefix)
		var members []*clusterProc
		for _, name := range []string{"m1", "m2", "m3"} {
			m := benchClusterProc(b, name, members, with("--role", "member", "--store", d.db.url)...)
			members = append(members, m)
			d.procs = append(d.procs, clusterProcOf(m))
		}
		gw := benchClusterProc(b, "gateway", members[:2], with("--role", "gateway")...)
		d.procs = append(d.procs, clusterProcOf(gw))
		gw.waitHosts(b, 3)
		for _, m := range members {
			m.waitHosts(b, 3)
		}
		d.url = gw.url
	default:
		b.Fatalf("no deployment %q", deploy)
	}
	return d
}

// clusterTurnFigures are what the ratios compare.
type clusterTurnFigures struct {
	turnsPerSec float64
	p50, p99    float64 // ms
	cpu         float64 // ms per turn, the deployment's A2 processes together
}

// benchDeployment is one deployment under load.
type benchDeployment struct {
	url   string // where the clients push: the node, or the gateway
	procs []benchProc
	admin *pgx.Conn // on the PostgreSQL server, for its statistics
	db    *benchDB  // nil on Pebble
}

// benchProc is one A2 process of a deployment.
type benchProc struct {
	name  string
	pid   int
	kill  func() // SIGKILL, and wait for the exit
	pprof string // the profiler's address, when it serves one
}

func clusterProcOf(p *clusterProc) benchProc {
	return benchProc{name: p.name, pid: p.cmd.Process.Pid, kill: func() { _ = p.cmd.Process.Kill(); <-p.exited }, pprof: flagValue(p.cmd.Args, "--pprof-addr")}
}

// flagValue is the value that follows flag in args ("" if none).
func flagValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// benchClusterProc starts a node of the cluster "bench" with its gossip on
// a free pair of ports, joining the gossip of join; one whose ports were
// taken before it bound them starts again on others, up to three times.
func benchClusterProc(b *testing.B, name string, join []*clusterProc, args ...string) *clusterProc {
	b.Helper()
	var addrs []string
	for _, j := range join {
		addrs = append(addrs, j.gossip)
	}
	for attempt := 1; ; attempt++ {
		a := append([]string{"--cluster", "bench", "--bind", "127.0.0.1:" + strconv.Itoa(freePortPair(b))}, args...)
		if len(addrs) > 0 {
			a = append(a, "--join", strings.Join(addrs, ","))
		}
		p, err := launchClusterProc(b, name, "", nil, a...)
		if err == nil {
			return p
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			b.Fatal(err)
		}
		b.Logf("%s: starting again on other ports: %v", name, err)
	}
}

// measure warms the deployment's sessions, measures b.N turns, kills the
// deployment's processes and reports the figures.
func (d *benchDeployment) measure(b *testing.B) clusterTurnFigures {
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clusterBenchClients}}
	defer hc.CloseIdleConnections()
	load := func(streams, turns int) loadgen.Result {
		return loadgen.Run(ctx, loadgen.Options{URL: d.url, Streams: streams, Sessions: clusterBenchSessions, Turns: turns,
			Prefix: "s", Spread: 10 * time.Millisecond, OneRequest: true, Client: hc})
	}
	warm := load(clusterBenchWarmers, clusterBenchSessions/clusterBenchWarmers)
	if len(warm.Errors) > 0 {
		b.Fatalf("warm-up: %d turns failed, the first: %v", len(warm.Errors), warm.Errors[0])
	}
	if warm.Turns != clusterBenchSessions {
		b.Fatalf("warm-up: %d turns, want one in each of the %d sessions", warm.Turns, clusterBenchSessions)
	}
	time.Sleep(clusterBenchSettle)

	n := b.N
	if n == 1 && !benchtimeIsCount() {
		n = clusterBenchTurns
	}
	var xact0 int64
	var backends0 map[int]time.Duration
	if d.db != nil {
		xact0, backends0 = d.db.xacts(b, d.admin), d.db.backendCPU(b, d.admin)
	}
	cpu0 := make([]time.Duration, len(d.procs))
	for i, p := range d.procs {
		cpu0[i] = loadgen.ProcessCPU([]int{p.pid})
	}
	self0 := selfCPU()
	b.ResetTimer()
	r := load(clusterBenchClients, (n+clusterBenchClients-1)/clusterBenchClients)
	b.StopTimer()
	self := selfCPU() - self0
	cpu := make([]time.Duration, len(d.procs))
	for i, p := range d.procs {
		cpu[i] = loadgen.ProcessCPU([]int{p.pid}) - cpu0[i]
	}
	var backends time.Duration
	if d.db != nil {
		// A backend that came during the phase counts from its start; one
		// that went, not at all (a pool keeps its connections).
		for pid, c := range d.db.backendCPU(b, d.admin) {
			backends += c - backends0[pid]
		}
	}
	if len(r.Errors) > 0 {
		b.Fatalf("%d turns failed, the first: %v", len(r.Errors), r.Errors[0])
	}
	// The processes go now: their PostgreSQL backends, as they exit,
	// publish the counts they still held.
	for _, p := range d.procs {
		p.kill()
	}
	turns := float64(r.Turns)
	f := clusterTurnFigures{
		turnsPerSec: turns / r.Elapsed.Seconds(),
		p50:         ms(loadgen.Quantile(r.Completion, 0.5)),
		p99:         ms(loadgen.Quantile(r.Completion, 0.99)),
	}
	b.ReportMetric(f.turnsPerSec, "turns/s")
	b.ReportMetric(f.p50, "p50-ms")
	b.ReportMetric(f.p99, "p99-ms")
	for i, p := range d.procs {
		b.ReportMetric(ms(cpu[i])/turns, p.name+"-cpu-ms/turn")
		f.cpu += ms(cpu[i]) / turns
	}
	b.ReportMetric(f.cpu, "cpu-ms/turn")
	b.ReportMetric(ms(self)/turns, "client-cpu-ms/turn")
	if d.db != nil {
		xact := d.db.xactsAfterExit(b, d.admin) - xact0
		b.ReportMetric(float64(xact)/turns, "xact/turn")
		b.ReportMetric(ms(backends)/turns, "pg-cpu-ms/turn")
	}
	return f
}

// probing reports whether this call is the testing package's first run of
// a benchmark, with b.N 1, when -benchtime asks for a count above 1: the
// package runs it again with that count, and a deployment's start and
// warm-up take tens of seconds, so this call does nothing.
func probing(b *testing.B) bool {
	if b.N != 1 || !benchtimeIsCount() {
		return false
	}
	n, _ := strconv.Atoi(strings.TrimSuffix(flag.Lookup("test.benchtime").Value.String(), "x"))
	return n > 1
}

// benchtimeIsCount reports whether -benchtime is a count (Nx).
func benchtimeIsCount() bool {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return false
	}
	v := f.Value.String()
	_, err := strconv.Atoi(strings.TrimSuffix(v, "x"))
	return strings.HasSuffix(v, "x") && err == nil
}

// benchDB is a deployment's own PostgreSQL database.
type benchDB struct {
	name, url string
}

// benchDatabase creates a fresh database on the server of admin (whose
// URL is adminURL), dropped when the benchmark ends.
func benchDatabase(b *testing.B, admin *pgx.Conn, adminURL, prefix string) *benchDB {
	b.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(adminURL)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	return &benchDB{name: name, url: u.String()}
}

// xacts is the database's count of committed transactions so far, as its
// backends have published it.
func (db *benchDB) xacts(b *testing.B, admin *pgx.Conn) int64 {
	b.Helper()
	var n int64
	if err := admin.QueryRow(context.Background(), "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", db.name).Scan(&n); err != nil {
		b.Fatalf("pg_stat_database: %v", err)
	}
	return n
}

// xactsAfterExit waits until no backend of the database is left (each
// publishes its counts as it exits) and returns xacts.
func (db *benchDB) xactsAfterExit(b *testing.B, admin *pgx.Conn) int64 {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db.name).Scan(&n); err != nil {
			b.Fatalf("pg_stat_activity: %v", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d backends of %s still there 30 s after its nodes were killed", n, db.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return db.xacts(b, admin)
}

// backendCPU returns the CPU time so far of each server process of the
// database's connections (from /proc: a server on another machine gives
// none).
func (db *benchDB) backendCPU(b *testing.B, admin *pgx.Conn) map[int]time.Duration {
	b.Helper()
	rows, err := admin.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE datname = $1", db.name)
	if err != nil {
		b.Fatalf("pg_stat_activity: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatalf("pg_stat_activity: %v", err)
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			out[int(pid)] = loadgen.ProcessCPU([]int{int(pid)})
		}
	}
	return out
}

// benchPostgres is the PostgreSQL server of a run's PostgreSQL
// deployments, found or started at the first that needs it.
type benchPostgres struct {
	parent   *testing.B // the server lives as long as it
	started  bool
	skip     string // why there is none
	adminURL string
	admin    *pgx.Conn
}

// server returns a connection to the server's administrative database and
// its URL, or skips b, saying why there is no server.
func (pg *benchPostgres) server(b *testing.B) (*pgx.Conn, string) {
	b.Helper()
	if !pg.started {
		pg.started = true
		pg.adminURL = os.Getenv("A2_TEST_POSTGRES_URL")
		if pg.adminURL == "" {
			pg.adminURL, pg.skip = startThrowawayPostgres(b, pg.parent)
		}
		if pg.skip == "" {
			admin, err := pgx.Connect(context.Background(), pg.adminURL)
			if err != nil {
				b.Fatalf("PostgreSQL at %s: %v", pg.adminURL, err)
			}
			pg.admin = admin
			pg.parent.Cleanup(func() { _ = admin.Close(context.Background()) })
		}
	}
	if pg.skip == "" && pg.admin == nil {
		b.Fatal("the PostgreSQL server did not start (see the deployment before this one)")
	}
	if pg.skip != "" {
		// go test prints a benchmark's skip only with -v; bench/main.go
		// shows this line.
		fmt.Printf("SKIP: %s: %s\n", b.Name(), pg.skip)
		b.Skip(pg.skip)
	}
	return pg.admin, pg.adminURL
}

// startThrowawayPostgres starts a PostgreSQL server in a temporary
// directory, on a free loopback port, stopped when owner ends (as the
// postgres user when this process runs as root, as .ci/run does). It
// returns the URL of its database "postgres", or why it started none.
func startThrowawayPostgres(b, owner *testing.B) (adminURL, skip string) {
	b.Helper()
	initdb, pgCtl := postgresBinaries()
	if initdb == "" {
		return "", "no PostgreSQL server: A2_TEST_POSTGRES_URL is not set, and there are no initdb and pg_ctl (in /usr/lib/postgresql/*/bin or on PATH) " +
			"to start a throwaway one. Set A2_TEST_POSTGRES_URL=postgres://USER@127.0.0.1:PORT/DB?sslmode=disable (a server whose user may CREATE DATABASE), " +
			"or install PostgreSQL (apt-get install postgresql), to run the PostgreSQL deployments"
	}
	dir, err := os.MkdirTemp("", "a2-bench-pg-")
	if err != nil {
		b.Fatal(err)
	}
	owner.Cleanup(func() { _ = os.RemoveAll(dir) })
	asPG := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", "no PostgreSQL server: A2_TEST_POSTGRES_URL is not set, and this process runs as root, which PostgreSQL refuses, " +
				"with no postgres user to start a throwaway server as (" + err.Error() + "). Set A2_TEST_POSTGRES_URL=postgres://... to run the PostgreSQL deployments"
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			b.Fatal(err)
		}
		asPG = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	data, logFile := filepath.Join(dir, "data"), filepath.Join(dir, "log")
	if out, err := asPG(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		b.Fatalf("initdb: %v\n%s", err, out)
	}
	_, port, _ := net.SplitHostPort(freePort(b))
	start := asPG(pgCtl, "-D", data, "-l", logFile, "-w", "-o", "-c listen_addresses=127.0.0.1 -p "+port+" -k "+dir, "start")
	if out, err := start.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		b.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	pid := 0
	if pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	}
	owner.Cleanup(func() {
		_ = asPG(pgCtl, "-D", data, "-m", "fast", "-w", "stop").Run()
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	b.Logf("a throwaway PostgreSQL server (%s) on 127.0.0.1:%s, data in %s", filepath.Dir(initdb), port, data)
	return "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable", ""
}

// postgresBinaries returns the paths of initdb and pg_ctl, of the newest
// version in /usr/lib/postgresql or else on PATH; "" when there are none.
func postgresBinaries() (initdb, pgCtl string) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range dirs {
		i, c := filepath.Join(dir, "initdb"), filepath.Join(dir, "pg_ctl")
		if isExecutable(i) && isExecutable(c) {
			return i, c
		}
	}
	i, err1 := exec.LookPath("initdb")
	c, err2 := exec.LookPath("pg_ctl")
	if err1 != nil || err2 != nil {
		return "", ""
	}
	return i, c
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
