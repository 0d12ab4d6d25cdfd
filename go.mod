module github.com/a2-runtime/a2

go 1.26
