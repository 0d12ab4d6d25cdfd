// Package playground is the node's playground: a page, at /, to pick or
// start a session of any agent and drive it with every action, beside its
// live event log (docs/clients.md). Plain HTML, CSS and JavaScript over
// the JavaScript client (/client/) and the fold's module (/fold.wasm),
// embedded in the binary: it loads nothing from elsewhere.
package playground

import "embed"

// Files are the playground's files: index.html, playground.js and
// playground.css.
//
//go:embed index.html playground.js playground.css
var Files embed.FS
