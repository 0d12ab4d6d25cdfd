package protocol

import "sort"

// Tool recovery policies (R-TOOL-12).
const (
	// RecoveryRerun runs a lapsed or cancelled call again (the default).
	RecoveryRerun = "rerun"
	// RecoveryReport never runs execute twice: a lapsed, cancelled or
	// transiently failed call records an interrupted error result instead.
	RecoveryReport = "report"
)

// ToolInfo is what recovery validation needs to know of a tool.
type ToolInfo struct {
	Name string
	// Local is true when the tool has a local execute function.
	Local bool
}

// ValidateToolRecovery checks a toolRecovery option at construction
// (R-TOOL-12, R-TOOL-16): every key names a known tool with a local
// execute (the agent's tools or the harness's own, such as Pi's bash), and
// every value is "rerun" or "report". It returns the set of report tools.
func ValidateToolRecovery(recovery map[string]string, tools []ToolInfo) (map[string]bool, error) {
	byName := map[string]ToolInfo{}
	for _, t := range tools {
		byName[t.Name] = t
	}
	names := make([]string, 0, len(recovery))
	for n := range recovery {
		names = append(names, n)
	}
	sort.Strings(names)
	report := map[string]bool{}
	for _, n := range names {
		t, ok := byName[n]
		switch {
		case !ok:
			return nil, configErr("toolRecovery."+n, "names no tool of the agent or its harness")
		case !t.Local:
			return nil, configErr("toolRecovery."+n, "names a tool without execute; only local tools are recovered")
		}
		switch recovery[n] {
		case RecoveryRerun:
		case RecoveryReport:
			report[n] = true
		default:
			return nil, configErr("toolRecovery."+n, "must be %q or %q, not %q", RecoveryRerun, RecoveryReport, recovery[n])
		}
	}
	return report, nil
}
