package client

import (
	"bytes"
	"errors"
	"syscall"
)

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
