package main

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
)

// socketHint is appended to the error of a request no Baton sidecar answered.
const socketHint = "is 'baton serve' running? Point --socket or BATON_SIDECAR_SOCKET_PATH at its socket"

// sidecarUnreachable returns the message of a request that no sidecar
// answered (nothing listens on the socket, or something that is not
// Baton), with a hint, and whether err is one. The client's own
// "client: …" text is kept once; "baton: " is printed by run.
func sidecarUnreachable(err error) (error, bool) {
	if _, ok := errors.AsType[*client.UnreachableError](err); ok {
		return &trimmedError{msg: fmt.Sprintf("%v (%s)", err, socketHint), err: err}, true
	}
	if _, ok := errors.AsType[*client.NotBatonError](err); ok {
		msg := fmt.Sprintf("%v (another program listens there; point --socket or BATON_SIDECAR_SOCKET_PATH at the sidecar's socket)", err)
		return &trimmedError{msg: msg, err: err}, true
	}
	return err, false
}

// unreadableConfig returns the error of a properties file that cannot be
// read ("--config /x/y.properties: no such file"), to print as is, and
// whether err is one.
func unreadableConfig(err error) (error, bool) {
	if fe, ok := errors.AsType[*props.FileError](err); ok {
		return fe, true
	}
	return err, false
}
