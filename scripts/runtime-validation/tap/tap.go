// Package tap writes the Test Anything Protocol (version 13) as opencontainers/runtime-tools'
// validation programs call it: the few calls of github.com/mndrix/tap-go they use, which
// Debian does not package. The output follows the TAP 13 specification (testanything.org):
// a version line, a plan, "ok N - description" or "not ok N - description" per test,
// "# SKIP" directives, "# " diagnostics and YAML blocks indented by two spaces.
package tap

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// T is one TAP stream.
type T struct {
	// The next test's number and whether the plan is written, shared with Todo's T.
	next    *int
	planned *bool
	todo    bool
	// Writer receives the stream (standard output by default).
	Writer io.Writer
}

// New starts a stream on standard output.
func New() *T {
	next, planned := 1, false
	return &T{next: &next, planned: &planned, Writer: os.Stdout}
}

// Todo is the same stream whose tests are marked "# TODO": not yet expected to pass.
func (t *T) Todo() *T {
	c := *t
	c.todo = true
	return &c
}

// Header writes the version line and, for a positive count, the plan.
func (t *T) Header(count int) {
	fmt.Fprintln(t.Writer, "TAP version 13")
	if count > 0 {
		fmt.Fprintf(t.Writer, "1..%d\n", count)
		*t.planned = true
	}
}

// Ok writes one test's result.
func (t *T) Ok(ok bool, description string) {
	word := "ok"
	if !ok {
		word = "not ok"
	}
	directive := ""
	if t.todo {
		directive = " # TODO"
	}
	fmt.Fprintf(t.Writer, "%s %d - %s%s\n", word, *t.next, oneLine(description), directive)
	*t.next++
}

// Pass writes a passing test.
func (t *T) Pass(description string) { t.Ok(true, description) }

// Fail writes a failing test.
func (t *T) Fail(description string) { t.Ok(false, description) }

// Skip writes count skipped tests, each with the reason.
func (t *T) Skip(count int, description string) {
	for i := 0; i < count; i++ {
		fmt.Fprintf(t.Writer, "ok %d # SKIP %s\n", *t.next, oneLine(description))
		*t.next++
	}
}

// Diagnostic writes a message as comment lines.
func (t *T) Diagnostic(message string) {
	for _, line := range strings.Split(strings.TrimRight(message, "\n"), "\n") {
		fmt.Fprintf(t.Writer, "# %s\n", line)
	}
}

// Diagnosticf writes a formatted message as comment lines.
func (t *T) Diagnosticf(format string, a ...interface{}) {
	t.Diagnostic(fmt.Sprintf(format, a...))
}

// YAML writes a value as a YAML block under the last test (JSON, which YAML reads, indented).
func (t *T) YAML(value interface{}) error {
	text, err := json.MarshalIndent(value, "  ", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(t.Writer, "  ---\n  %s\n  ...\n", text)
	return nil
}

// AutoPlan writes the plan, after the tests, when Header did not.
func (t *T) AutoPlan() {
	if !*t.planned {
		fmt.Fprintf(t.Writer, "1..%d\n", *t.next-1)
		*t.planned = true
	}
}

func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
