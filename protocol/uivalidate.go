package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// validateMessageJSON checks a UIMessage in its JSON form the way the AI
// SDK's validateUIMessages does (ai package, version 7): an ID and a role, at
// least one part unless the message is the assistant's, and each part of a
// known type with its required fields of the right JSON type, the fields its
// type or tool state forbids absent, and enumerations within their values.
// Fields the SDK does not know are accepted (it strips them; A2 keeps them
// in the log and drops them from state). Each error names the JSON path of
// the offending value below field, such as payload.message.parts[1].type.
func validateMessageJSON(field string, raw json.RawMessage) error {
	m, err := jsonObject(field, raw)
	if err != nil {
		return err
	}
	id, err := needString(m, field, "id")
	if err != nil {
		return err
	}
	if err := ValidateCallerID(field+".id", id); err != nil {
		return err
	}
	role, err := needString(m, field, "role")
	if err != nil {
		return err
	}
	switch role {
	case RoleUser, RoleAssistant, RoleSystem:
	default:
		return invalid(field+".role", "must be user, assistant or system, not %q", role)
	}
	rawParts, ok := m["parts"]
	if !ok || isNull(rawParts) {
		return invalid(field+".parts", "is required")
	}
	var parts []json.RawMessage
	if json.Unmarshal(rawParts, &parts) != nil {
		return invalid(field+".parts", "must be an array")
	}
	if len(parts) == 0 && role != RoleAssistant {
		return invalid(field+".parts", "must contain at least one part")
	}
	for i, p := range parts {
		if err := validatePartJSON(fmt.Sprintf("%s.parts[%d]", field, i), p, false); err != nil {
			return err
		}
	}
	return nil
}

// JSON kinds of a part field.
type jkind int

const (
	jAny jkind = iota
	jString
	jBool
	jObject
	jArray
	jNever       // must be absent
	jProviderMD  // {provider: {key: value}}
	jStringMap   // {key: "string"}
	jCitations   // [{source: {sourceType: "url" | "document", ...}}]
	jStreamState // "streaming" | "done"
	jEncoding    // "json" | "text"
	jFalse       // false
)

type jfield struct {
	name     string
	kind     jkind
	required bool
}

var (
	pmd       = jfield{"providerMetadata", jProviderMD, false}
	partShape = map[string][]jfield{
		PartText:      {{"text", jString, true}, {"citations", jCitations, false}, {"state", jStreamState, false}, pmd},
		PartReasoning: {{"id", jString, false}, {"text", jString, true}, {"state", jStreamState, false}, pmd},
		PartCustom:    {{"kind", jString, true}, pmd},
		PartSourceURL: {{"sourceId", jString, true}, {"url", jString, true}, {"title", jString, false}, pmd},
		PartSourceDoc: {{"sourceId", jString, true}, {"mediaType", jString, true}, {"title", jString, true}, {"filename", jString, false}, pmd},
		PartFile: {{"mediaType", jString, true}, {"filename", jString, false}, {"url", jString, true},
			{"providerReference", jStringMap, false}, pmd},
		PartReasonFile: {{"mediaType", jString, true}, {"url", jString, true}, pmd},
		PartSteering:   {{"id", jString, true}, {"parts", jArray, true}},
		PartStepStart:  {},
	}
	toolCommon = []jfield{{"toolCallId", jString, true}, {"title", jString, false}, {"toolMetadata", jObject, false},
		{"providerExecuted", jBool, false}, {"callProviderMetadata", jProviderMD, false}}
	toolStates = map[string][]jfield{
		ToolInputStreaming: {{"rawInput", jString, false}, {"inputEncoding", jEncoding, false},
			{"output", jNever, false}, {"errorText", jNever, false}, {"approval", jNever, false}},
		ToolInputAvailable:    {{"output", jNever, false}, {"errorText", jNever, false}, {"approval", jNever, false}},
		ToolApprovalRequested: {{"output", jNever, false}, {"errorText", jNever, false}, {"approval", jObject, true}},
		ToolApprovalResponded: {{"output", jNever, false}, {"errorText", jNever, false}, {"approval", jObject, true}},
		ToolOutputAvailable: {{"errorText", jNever, false}, {"resultProviderMetadata", jProviderMD, false},
			{"preliminary", jBool, false}, {"approval", jObject, false}},
		ToolOutputError: {{"output", jNever, false}, {"errorText", jString, true},
			{"resultProviderMetadata", jProviderMD, false}, {"approval", jObject, false}},
		ToolOutputDenied: {{"output", jNever, false}, {"errorText", jNever, false}, {"approval", jObject, true}},
	}
	partTypes = "text, reasoning, custom, file, reasoning-file, source-url, source-document, steering-message, step-start, dynamic-tool, or a type starting with data- or tool-"
)

// validatePartJSON checks one part; inSteering restricts it to the text and
// file parts a steering-message part holds.
func validatePartJSON(path string, raw json.RawMessage, inSteering bool) error {
	m, err := jsonObject(path, raw)
	if err != nil {
		return err
	}
	typ, err := needString(m, path, "type")
	if err != nil {
		return err
	}
	if inSteering && typ != PartText && typ != PartFile {
		return invalid(path+".type", "is %q: a steering message holds text and file parts only", typ)
	}
	switch {
	case typ == PartCompaction:
		return invalid(path+".type", "%q is written by A2 only", PartCompaction)
	case strings.HasPrefix(typ, "data-"):
		return checkFields(path, m, []jfield{{"id", jString, false}})
	case strings.HasPrefix(typ, "tool-") || typ == PartDynamicTool:
		return validateToolPartJSON(path, m, typ)
	}
	shape, ok := partShape[typ]
	if !ok {
		return invalid(path+".type", "is %q, not a known part type: expected %s", typ, partTypes)
	}
	if err := checkFields(path, m, shape); err != nil {
		return err
	}
	if typ == PartSteering {
		var inner []json.RawMessage
		_ = json.Unmarshal(m["parts"], &inner)
		for i, p := range inner {
			if err := validatePartJSON(fmt.Sprintf("%s.parts[%d]", path, i), p, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateToolPartJSON(path string, m map[string]json.RawMessage, typ string) error {
	if err := checkFields(path, m, toolCommon); err != nil {
		return err
	}
	if typ == PartDynamicTool {
		if err := checkFields(path, m, []jfield{{"toolName", jString, true}, {"dynamic", jFalse, false}}); err != nil {
			return err
		}
	}
	state, err := needString(m, path, "state")
	if err != nil {
		return err
	}
	shape, ok := toolStates[state]
	if !ok {
		return invalid(path+".state", "is %q, not a tool state: expected input-streaming, input-available, approval-requested, approval-responded, output-available, output-error or output-denied", state)
	}
	if err := checkFields(path, m, shape); err != nil {
		return err
	}
	raw, ok := m["approval"]
	if !ok || isNull(raw) {
		return nil
	}
	a, _ := jsonObject(path+".approval", raw)
	ap := path + ".approval"
	if err := checkFields(ap, a, []jfield{{"id", jString, true}, {"requestReason", jString, false}, {"isAutomatic", jBool, false}, {"signature", jString, false}}); err != nil {
		return err
	}
	approved, has := a["approved"]
	switch state {
	case ToolApprovalRequested:
		if err := checkFields(ap, a, []jfield{{"approved", jNever, false}, {"reason", jNever, false}}); err != nil {
			return err
		}
	case ToolApprovalResponded:
		if err := checkFields(ap, a, []jfield{{"approved", jBool, true}, {"reason", jString, false}}); err != nil {
			return err
		}
	case ToolOutputAvailable, ToolOutputError, ToolOutputDenied:
		want := state != ToolOutputDenied
		if state == ToolOutputDenied && !has {
			return invalid(ap+".approved", "is required in state %s", state)
		}
		if has && !bytes.Equal(bytes.TrimSpace(approved), []byte(fmt.Sprint(want))) {
			return invalid(ap+".approved", "must be %v in state %s", want, state)
		}
		if err := checkFields(ap, a, []jfield{{"reason", jString, false}}); err != nil {
			return err
		}
	}
	return nil
}

// checkFields checks the fields of m against their specs.
func checkFields(path string, m map[string]json.RawMessage, fields []jfield) error {
	for _, f := range fields {
		raw, ok := m[f.name]
		p := path + "." + f.name
		if f.kind == jNever {
			if ok {
				return invalid(p, "must not be set here")
			}
			continue
		}
		if !ok {
			if f.required {
				return invalid(p, "is required")
			}
			continue
		}
		if err := checkKind(p, raw, f.kind); err != nil {
			return err
		}
	}
	return nil
}

func checkKind(p string, raw json.RawMessage, k jkind) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return invalid(p, "is not valid JSON")
	}
	switch k {
	case jString:
		if _, ok := v.(string); !ok {
			return invalid(p, "must be a string")
		}
	case jBool:
		if _, ok := v.(bool); !ok {
			return invalid(p, "must be true or false")
		}
	case jFalse:
		if v != false {
			return invalid(p, "must be false when set")
		}
	case jObject:
		if _, ok := v.(map[string]any); !ok {
			return invalid(p, "must be an object")
		}
	case jArray:
		if _, ok := v.([]any); !ok {
			return invalid(p, "must be an array")
		}
	case jProviderMD:
		o, ok := v.(map[string]any)
		if !ok {
			return invalid(p, "must be an object of provider names to objects")
		}
		for name, inner := range o {
			if _, ok := inner.(map[string]any); !ok {
				return invalid(p+"."+name, "must be an object")
			}
		}
	case jStringMap:
		o, ok := v.(map[string]any)
		if !ok {
			return invalid(p, "must be an object of strings")
		}
		for name, inner := range o {
			if _, ok := inner.(string); !ok {
				return invalid(p+"."+name, "must be a string")
			}
		}
	case jCitations:
		arr, ok := v.([]any)
		if !ok {
			return invalid(p, "must be an array")
		}
		for i, c := range arr {
			cp := fmt.Sprintf("%s[%d]", p, i)
			o, ok := c.(map[string]any)
			if !ok {
				return invalid(cp, "must be an object")
			}
			src, ok := o["source"].(map[string]any)
			if !ok {
				return invalid(cp+".source", "is required and must be an object")
			}
			if st := src["sourceType"]; st != "url" && st != "document" {
				return invalid(cp+".source.sourceType", "must be \"url\" or \"document\"")
			}
		}
	case jStreamState:
		if v != "streaming" && v != "done" {
			return invalid(p, "must be \"streaming\" or \"done\"")
		}
	case jEncoding:
		if v != "json" && v != "text" {
			return invalid(p, "must be \"json\" or \"text\"")
		}
	}
	return nil
}

func jsonObject(path string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &m) != nil {
		return nil, invalid(path, "must be an object")
	}
	return m, nil
}

func needString(m map[string]json.RawMessage, path, key string) (string, error) {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return "", invalid(path+"."+key, "is required")
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", invalid(path+"."+key, "must be a string")
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}
