package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// files serves a sandbox's file operations from the server's side of its
// working directory. base is the working directory as the sandbox's
// commands see it (an absolute path of the sandbox); root is the same
// directory opened on the host, which confines every operation to it.
// Each operation opens the directory anew (an os.Root), so a sandbox holds
// no file open between calls.
type files struct {
	base string
	host string
}

func openFiles(hostDir, base string) (*files, error) {
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: create the working directory: %w", err)
	}
	return &files{base: base, host: hostDir}, nil
}

// open opens the working directory and resolves p in it, unless ctx has
// ended.
func (f *files) open(ctx context.Context, p string) (*os.Root, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	r, err := f.rel(p)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(f.host)
	if err != nil {
		return nil, "", fmt.Errorf("sandbox: open the working directory: %w", err)
	}
	return root, r, nil
}

// rel turns a sandbox path into one relative to the working directory.
func (f *files) rel(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: an empty path", ErrOutside)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("sandbox: a path with a NUL byte")
	}
	if path.IsAbs(p) {
		r, ok := strings.CutPrefix(path.Clean(p), f.base)
		if !ok || (r != "" && r[0] != '/') {
			return "", fmt.Errorf("%w: %q is not within %s", ErrOutside, p, f.base)
		}
		p = strings.TrimPrefix(r, "/")
	}
	p = path.Clean(p)
	if p == "" {
		p = "."
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w: %q", ErrOutside, p)
	}
	return filepath.FromSlash(p), nil
}

// escaped reports an os.Root refusal as ErrOutside.
func escaped(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes from parent") {
		return fmt.Errorf("%w: %v", ErrOutside, err)
	}
	return err
}

func (f *files) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	root, r, err := f.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	file, err := root.Open(r)
	if err != nil {
		return nil, escaped(err)
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	if st.IsDir() {
		file.Close()
		return nil, fmt.Errorf("%w: %q", ErrIsDirectory, p)
	}
	return file, nil
}

func (f *files) WriteFile(ctx context.Context, p string, content io.Reader) error {
	root, r, err := f.open(ctx, p)
	if err != nil {
		return err
	}
	defer root.Close()
	if r == "." {
		return fmt.Errorf("%w: %q", ErrIsDirectory, p)
	}
	if dir := filepath.Dir(r); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return escaped(err)
		}
	}
	if st, err := root.Stat(r); err == nil && st.IsDir() {
		return fmt.Errorf("%w: %q", ErrIsDirectory, p)
	}
	file, err := root.OpenFile(r, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return escaped(err)
	}
	_, err = io.Copy(file, ctxReader{ctx, content})
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader stops a copy once its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func (f *files) Stat(ctx context.Context, p string) (FileInfo, error) {
	root, r, err := f.open(ctx, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	st, err := root.Stat(r)
	if err != nil {
		return FileInfo{}, escaped(err)
	}
	info := FileInfo{Type: "other", Size: st.Size()}
	switch {
	case st.Mode().IsRegular():
		info.Type = "file"
	case st.IsDir():
		info.Type = "directory"
	}
	return info, nil
}

func (f *files) ListDirectory(ctx context.Context, p string) ([]DirEntry, error) {
	root, r, err := f.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := root.Open(r)
	if err != nil {
		return nil, escaped(err)
	}
	defer dir.Close()
	if st, err := dir.Stat(); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%w: %q", ErrNotDirectory, p)
	}
	list, err := dir.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(list))
	for _, e := range list {
		t := "other"
		switch m := e.Type(); {
		case m&fs.ModeSymlink != 0:
			t = "symlink"
		case m.IsDir():
			t = "directory"
		case m.IsRegular():
			t = "file"
		}
		out = append(out, DirEntry{Name: e.Name(), Type: t})
	}
	return out, nil
}

func (f *files) DeleteFile(ctx context.Context, p string) (bool, error) {
	root, r, err := f.open(ctx, p)
	if err != nil {
		return false, err
	}
	defer root.Close()
	st, err := root.Lstat(r)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, escaped(err)
	}
	if st.IsDir() {
		return false, fmt.Errorf("%w: %q", ErrIsDirectory, p)
	}
	if err := root.Remove(r); err != nil {
		return false, escaped(err)
	}
	return true, nil
}

// commandDir resolves a command's directory (it must exist within the
// working directory) to its host path and the sandbox's own path of it.
func (f *files) commandDir(dir string) (host, inside string, err error) {
	if dir == "" {
		return f.host, f.base, nil
	}
	root, r, err := f.open(context.Background(), dir)
	if err != nil {
		return "", "", err
	}
	defer root.Close()
	st, err := root.Stat(r)
	if err != nil {
		return "", "", escaped(err)
	}
	if !st.IsDir() {
		return "", "", fmt.Errorf("%w: %q", ErrNotDirectory, dir)
	}
	return filepath.Join(f.host, r), path.Join(f.base, filepath.ToSlash(r)), nil
}
