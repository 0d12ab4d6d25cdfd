//go:build a2embed

package assets

import _ "embed"

var (
	//go:embed fold.wasm
	embeddedWasm []byte
	//go:embed wasm_exec.js
	embeddedExec []byte
)

func init() { embedded = &embeddedFiles{wasm: embeddedWasm, exec: embeddedExec} }
