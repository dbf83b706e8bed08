package lock

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxObjectBytes is the longest object name accepted, in bytes of UTF-8.
const MaxObjectBytes = 256

// privateLock is the name of the node whose existence means "held".
const privateLock = "privateLock"

// safeByte reports whether b maps to itself in an escaped object name.
func safeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '-'
}

// ValidateObject checks that obj is a monitor object name: 1–256 bytes of
// UTF-8 without control characters.
func ValidateObject(obj string) error {
	switch {
	case obj == "":
		return fmt.Errorf("%w: empty", ErrInvalidObject)
	case len(obj) > MaxObjectBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidObject, len(obj), MaxObjectBytes)
	case !utf8.ValidString(obj):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidObject)
	}
	for i, r := range obj {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalidObject, r, i)
		}
	}
	return nil
}

// EscapeObject maps an object name to one flat ZooKeeper node name. Bytes of
// "A-Z a-z 0-9 . _ : -" map to themselves, every other byte to "%XX"; the
// first byte is escaped too where the name would otherwise be ".", ".." or
// "zookeeper". The mapping is one to one, so UnescapeObject reverses it.
func EscapeObject(obj string) (string, error) {
	if err := ValidateObject(obj); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(obj))
	reserved := obj == "." || obj == ".." || obj == "zookeeper"
	for i := 0; i < len(obj); i++ {
		c := obj[i]
		if safeByte(c) && !(i == 0 && reserved) {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String(), nil
}

// UnescapeObject reverses EscapeObject. It rejects names EscapeObject would
// not produce, so every object has exactly one node name.
func UnescapeObject(name string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			if !safeByte(c) {
				return "", fmt.Errorf("%w: node name %q has unescaped byte %q", ErrInvalidObject, name, c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", fmt.Errorf("%w: node name %q ends inside an escape", ErrInvalidObject, name)
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(name[i+1:i+3]) != name[i+1:i+3] {
			return "", fmt.Errorf("%w: node name %q has bad escape %q", ErrInvalidObject, name, name[i:i+3])
		}
		b.WriteByte(byte(v))
		i += 2
	}
	obj := b.String()
	if again, err := EscapeObject(obj); err != nil || again != name {
		return "", fmt.Errorf("%w: node name %q is not canonical", ErrInvalidObject, name)
	}
	return obj, nil
}

// seqOf returns the sequence suffix of a child name "<prefix>-<digits>".
func seqOf(name string) (int64, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return 0, false
	}
	v, err := strconv.ParseInt(name[i+1:], 10, 64)
	return v, err == nil
}

// sortedQueue returns the children other than privateLock in the plugin's
// order (by name), and whether privateLock is among them.
func sortedQueue(children []string) (queue []string, locked bool) {
	queue = make([]string, 0, len(children))
	for _, c := range children {
		if c == privateLock {
			locked = true
			continue
		}
		queue = append(queue, c)
	}
	sort.Strings(queue)
	return queue, locked
}
