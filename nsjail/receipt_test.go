package nsjail

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/neonbox/neonbox-ns/overlay"
)

// checkReceiptJSON is the body shared by the fuzz target and its corpus
// test: whatever bytes a run puts in file names, output and environment
// names, the receipt is one valid JSON document in valid UTF-8.
func checkReceiptJSON(t *testing.T, path, out string, sig string) {
	s := sig
	r := &Receipt{
		ID: "0123456789abcdef", Status: StatusExecutionError, Signal: &s, Command: []string{path, out},
		Changes:     overlay.Changes{Added: []overlay.Change{{Path: path, Type: "file"}}, Modified: []overlay.Change{}, Deleted: []overlay.Change{{Path: out, Type: "dir"}}},
		ScrubbedEnv: []string{path}, Stdout: &out, Stderr: &path, Warnings: []string{out},
		Error: &StepError{Stage: "exec", Path: path, Message: out}, ProtectedPathsTouched: []string{path},
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(buf.Bytes()) {
		t.Fatalf("receipt is not valid UTF-8: %q", buf.Bytes())
	}
	dec := json.NewDecoder(&buf)
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("receipt is not JSON: %v", err)
	}
	if dec.More() {
		t.Fatal("more than one JSON document")
	}
	if v["id"] != r.ID {
		t.Fatalf("id did not survive: %v", v["id"])
	}
}

var receiptSeeds = [][3]string{
	{"a.txt", "hello\n", "SIGSEGV"},
	{"\xff\xfe bad utf8", "\x00\x01\x1b]0;title\a", ""},
	{"line\nbreak", "\u2028\u2029 <script>&", "\xc3"},
	{string(bytes.Repeat([]byte("x"), 255)), "", "\"quoted\""},
}

func TestReceiptJSONCorpus(t *testing.T) {
	for _, s := range receiptSeeds {
		checkReceiptJSON(t, s[0], s[1], s[2])
	}
}

func FuzzReceiptJSON(f *testing.F) {
	for _, s := range receiptSeeds {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(checkReceiptJSON)
}
