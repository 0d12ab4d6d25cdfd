// Package jsclient carries A2's JavaScript client (src/, plain JavaScript
// modules) for a node to serve to browsers at /client/ (clients/assets).
package jsclient

import "embed"

// Sources are the client's modules: src/index.js, src/client.js,
// src/fold.js.
//
//go:embed src/*.js
var Sources embed.FS
