package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file or directory of a layer. Paths are relative to the
// image's root, without a leading slash; directories end in "/".
type entry struct {
	path     string
	mode     int64
	uid, gid int
	data     []byte
}

func dir(path string, uid, gid int) entry {
	return entry{path: path + "/", mode: 0o755, uid: uid, gid: gid}
}

func file(path string, mode int64, data []byte) entry {
	return entry{path: path, mode: mode, data: data}
}

// baseLayer holds everything but the binary: it changes only with the CA
// bundle, so registries and nodes keep it across releases.
func baseLayer(caBundle []byte, epoch time.Time) (v1.Layer, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	return tarLayer([]entry{
		dir("etc", 0, 0),
		file("etc/passwd", 0o644, []byte(passwd)),
		file("etc/group", 0o644, []byte(group)),
		dir("etc/ssl", 0, 0),
		dir("etc/ssl/certs", 0, 0),
		file(strings.TrimPrefix(CABundlePath, "/"), 0o644, caBundle),
		dir(strings.TrimPrefix(StoragePath, "/"), UID, GID),
	}, epoch)
}

// binaryLayer holds the binary, owned by root: the agent cannot rewrite it.
func binaryLayer(bin []byte, epoch time.Time) (v1.Layer, error) {
	return tarLayer([]entry{
		dir("bin", 0, 0),
		file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin),
	}, epoch)
}

// tarLayer writes the entries sorted by path with every time at epoch, so
// that the same entries always give the same bytes, and compresses them
// with gzip (deterministic for a given Go release).
func tarLayer(entries []entry, epoch time.Time) (v1.Layer, error) {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.path,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
