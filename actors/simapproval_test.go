package actors

import (
	"slices"

	"github.com/a2-runtime/a2/protocol"
)

// The simulated schedules' approvals (simulate_test.go): the clients answer
// the pending approvals of the tool "guard" (NeedsApproval), and the check
// holds every run of it to an approval on record (R-APPROVAL-01).

// approval answers the state's first pending approval (approve or deny);
// the zero event when none is pending.
func (sm *simulation) approval(approve bool) protocol.Event {
	st, _ := sm.frontier()
	if st == nil || len(st.PendingApprovals) == 0 {
		return protocol.Event{}
	}
	ids := make([]string, 0, len(st.PendingApprovals))
	for id := range st.PendingApprovals {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	pa := st.PendingApprovals[ids[0]]
	sm.logf("approval of %s: %v", pa.ToolCallID, approve)
	return protocol.Inputs.Approval(protocol.ApprovalResponse{ApprovalID: ids[0], ToolCallID: pa.ToolCallID, Approved: approve,
		RequestID: pa.RequestID, GenerationID: pa.GenerationID})
}

// approvedCalls lists the tool calls the log approves: an approval
// command whose decision applied it. (The state is not enough: a retry or
// a stop can replace the response the call's part was in.)
func approvedCalls(log []protocol.Event) map[string]bool {
	approved := map[string]bool{}
	for _, c := range applied(log) {
		if c.Action == protocol.ActionApproval && c.Approved != nil && *c.Approved {
			approved[c.ToolCallID] = true
		}
	}
	return approved
}
