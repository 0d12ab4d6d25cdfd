package a2_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The repository's own house rules, checked so that they hold after every
// change: docs/rules.md defines every rule a Go comment cites, the docs and
// the comments point at nothing outside the repository's history (no work
// session or issue numbers), and no hand-written Go file outgrows a reader.

var (
	ruleID       = regexp.MustCompile(`\b(R-[A-Z]+|OQ)-[0-9]+[a-z]?\b`)
	ruleDefined  = regexp.MustCompile(`^- \*\*((?:R-[A-Z]+|OQ)-[0-9]+[a-z]?)\*\*: \S`)
	workSessions = regexp.MustCompile(`(?i)\b(session|issue) [0-9]+\b`)
)

// goFiles returns the repository's Go files, hand-written and generated,
// outside node_modules.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || (strings.HasPrefix(d.Name(), ".") && path != ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files: the test must run in the repository's root", len(files))
	}
	return files
}

// comments returns the text of a Go file's // comments, line by line, with
// their line numbers.
func comments(t *testing.T, path string) map[int]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[int]string)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if i := strings.Index(sc.Text(), "//"); i >= 0 {
			out[n] = sc.Text()[i:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEveryCitedRuleIsDefined(t *testing.T) {
	b, err := os.ReadFile("docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := make(map[string]bool)
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := ruleDefined.FindStringSubmatch(line); m != nil {
			if defined[m[1]] {
				t.Errorf("docs/rules.md defines %s twice", m[1])
			}
			defined[m[1]] = true
		}
	}
	cited := make(map[string][]string) // rule -> where
	for _, path := range goFiles(t) {
		for n, c := range comments(t, path) {
			for _, id := range ruleID.FindAllString(c, -1) {
				cited[id] = append(cited[id], path+":"+strconv.Itoa(n))
			}
		}
	}
	if len(cited) == 0 {
		t.Fatal("no Go comment cites a rule: the pattern is wrong")
	}
	var missing []string
	for id, where := range cited {
		if !defined[id] {
			slices.Sort(where)
			missing = append(missing, id+" (cited at "+where[0]+")")
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("docs/rules.md does not define %s", m)
	}
}

func TestDocsAndCommentsNameNoWorkSessions(t *testing.T) {
	check := func(where, text string) {
		if m := workSessions.FindString(text); m != "" {
			t.Errorf("%s: %q names a work session or an issue, which a reader of the repository cannot look up (say what, or cite a doc's section)", where, m)
		}
	}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, path := range append(docs, "README.md") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			check(path+":"+strconv.Itoa(i+1), line)
		}
	}
	for _, path := range goFiles(t) {
		for n, c := range comments(t, path) {
			check(path+":"+strconv.Itoa(n), c)
		}
	}
}

func TestNoHandWrittenGoFileOver700Lines(t *testing.T) {
	for _, path := range goFiles(t) {
		if strings.HasSuffix(path, ".pb.go") {
			continue // generated
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > 700 {
			t.Errorf("%s has %d lines: split it along its responsibilities (at most 700)", path, n)
		}
	}
}
