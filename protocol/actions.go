package protocol

// Actions builds the commands of a chat client's actions (useAgent's
// sendMessage, steer, stop, approve, deny, respond, retry, pause, resume and
// queue actions) from the state the user saw when acting (R-CLIENT-18):
// Stop and Send now carry the turn and the frontier of that render. Each
// action returns the commands to push, or none when there is nothing to
// address (R-CLIENT-19). Actions is pure; NewID supplies the IDs that the
// pusher assigns (and keeps across transport retries), and the fresh
// retryId of each retry.
type Actions struct {
	// View is the rendered state (usually Optimistic over the confirmed
	// state).
	View *AIState
	// NewID returns a fresh, unique caller ID.
	NewID func() string
}

func (a Actions) withID(ev Event) []Event {
	if ev.ID == "" {
		ev.ID = a.NewID()
	}
	return []Event{ev}
}

// lastSeen is the frontier of the render: the last projection entry shown.
func (a Actions) lastSeen() *int64 {
	pr := a.View.ActiveProjection
	if pr == nil {
		return nil
	}
	n := int64(len(pr.Entries) - 1)
	return &n
}

// activeTurn is the turn of the render, nil when it showed none.
func (a Actions) activeTurn() *string {
	if t := a.View.Active; t != nil {
		id := t.TurnID
		return &id
	}
	return nil
}

// SendMessage queues text as a user message of one text part
// (R-CLIENT-11). generate false sends passive context.
func (a Actions) SendMessage(text string, generate *bool) []Event {
	m := UIMessage{ID: a.NewID(), Role: RoleUser, Parts: []Part{{Type: PartText, Text: text}}}
	return []Event{Inputs.Message(m, MessageOptions{Generate: generate})}
}

// Send queues a full message.
func (a Actions) Send(m UIMessage, generate *bool) []Event {
	if m.ID == "" {
		m.ID = a.NewID()
	}
	return []Event{Inputs.Message(m, MessageOptions{Generate: generate})}
}

// Steer steers the active turn of the render after its current step, or
// sends when it showed none (R-CLIENT-12).
func (a Actions) Steer(text string) []Event {
	m := UIMessage{ID: a.NewID(), Role: RoleUser, Parts: []Part{{Type: PartText, Text: text}}}
	return []Event{Inputs.Steer(a.activeTurn(), m, a.lastSeen())}
}

// Stop stops the active turn of the render at the frontier it showed
// (R-CLIENT-13, R-STOP-04); nothing when it showed no turn (R-STOP-03).
func (a Actions) Stop() []Event {
	t := a.activeTurn()
	if t == nil {
		return nil
	}
	return a.withID(Inputs.Stop(*t, a.lastSeen()))
}

// Approve and Deny answer a pending approval of the render (R-CLIENT-14),
// copying its request and generation IDs; nothing when it is not pending.
func (a Actions) Approve(approvalID string) []Event { return a.answer(approvalID, true, "") }

// Deny denies a pending approval, with an optional reason.
func (a Actions) Deny(approvalID, reason string) []Event { return a.answer(approvalID, false, reason) }

func (a Actions) answer(approvalID string, approved bool, reason string) []Event {
	pa, ok := a.View.PendingApprovals[approvalID]
	if !ok {
		return nil
	}
	return []Event{Inputs.Approval(ApprovalResponse{ApprovalID: approvalID, ToolCallID: pa.ToolCallID, Approved: approved,
		Reason: reason, RequestID: pa.RequestID, GenerationID: pa.GenerationID})}
}

// Respond answers a pending application input of the render (R-CLIENT-14).
func (a Actions) Respond(inputID string, value []byte) []Event {
	pi, ok := a.View.PendingInputs[inputID]
	if !ok {
		return nil
	}
	return []Event{Inputs.Input(InputResponse{InputID: inputID, Value: value, RequestID: pi.RequestID, GenerationID: pi.GenerationID})}
}

// Retry retries the render's failed response with a fresh retryId
// (R-CLIENT-15, R-RETRY-05); nothing when no response failed.
func (a Actions) Retry() []Event {
	t := a.View.Active
	if t == nil || !t.Failed || (a.View.Error != nil && a.View.Error.StepLimit) {
		return nil
	}
	return []Event{Inputs.Retry(RetryOptions{MessageID: t.Input.ID, ResponseMessageID: t.ResponseMessageID, RetryID: a.NewID()})}
}

// Pause pauses now or after the turn (R-CLIENT-16).
func (a Actions) Pause(when string) []Event { return a.withID(Inputs.Pause(when)) }

// Resume resumes (R-CLIENT-16).
func (a Actions) Resume() []Event { return a.withID(Inputs.Resume()) }

// QueueEdit replaces a pending input's content; its ID stays.
func (a Actions) QueueEdit(m UIMessage) []Event { return a.withID(Inputs.Queue.Edit(m)) }

// QueueMove moves a pending input before beforeID (nil: the end).
func (a Actions) QueueMove(inputID string, beforeID *string) []Event {
	return a.withID(Inputs.Queue.Move(inputID, beforeID))
}

// QueueRemove removes a pending input.
func (a Actions) QueueRemove(inputID string) []Event { return a.withID(Inputs.Queue.Remove(inputID)) }

// QueueSendNow promotes a queued input for a handoff after the render's
// active turn's current step, carrying that turn (nil when idle) and its
// frontier (R-CLIENT-16, R-CLIENT-18).
func (a Actions) QueueSendNow(inputID string) []Event {
	return a.withID(Inputs.Queue.SendNow(inputID, a.activeTurn(), a.lastSeen()))
}
