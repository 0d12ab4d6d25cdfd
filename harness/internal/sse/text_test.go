package sse

import (
	"reflect"
	"testing"
)

func TestRawString(t *testing.T) {
	cases := map[string]string{
		`"plain"`:             "plain",
		`"a\"b\\c\/d\n\t"`:    "a\"b\\c/d\n\t",
		`"caf\u00e9"`:         "café",
		`"\ud83d\ude42"`:      "🙂",
		`"lone \ud83d!"`:      "lone \uFFFD!",
		"\"raw \xc3\"":        "raw \xc3",
		`null`:                "",
		``:                    "",
		`"tail \u00e9\u00e9"`: "tail éé",
	}
	for in, want := range cases {
		got, err := RawString([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("RawString(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`12`, `{"a":1}`, `"bad \x"`, `"\u12"`, `"`} {
		if _, err := RawString([]byte(bad)); err == nil {
			t.Errorf("RawString(%q) accepted", bad)
		}
	}
}

func TestUTF8Joiner(t *testing.T) {
	var j UTF8Joiner
	var out []string
	for _, frag := range []string{"Z\xc3", "\xbcrich \xf0\x9f", "\x99", "\x82!", "\xff"} {
		out = append(out, j.Push([]byte(frag)))
	}
	out = append(out, j.Flush())
	if want := []string{"Z", "ürich ", "", "🙂!", "\uFFFD", ""}; !reflect.DeepEqual(out, want) {
		t.Fatalf("%q", out)
	}
	j.Push([]byte("\xe2\x82"))
	if got := j.Flush(); got != "\uFFFD" {
		t.Fatalf("an incomplete tail flushes as U+FFFD, got %q", got)
	}
}
