package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// errNotTLS reports a tunnel whose first bytes are not a TLS handshake.
var errNotTLS = errors.New("not a TLS ClientHello")

// errBadHello reports a TLS ClientHello that cannot be parsed.
var errBadHello = errors.New("malformed TLS ClientHello")

// The TLS limits the peek enforces, as crypto/tls does for a ClientHello.
const (
	recordHeaderLen   = 5
	recordTypeHS      = 0x16  // TLS record type: handshake
	maxRecordPlain    = 16384 // largest plaintext record (RFC 8446, 5.1)
	maxHelloLen       = 65536 // crypto/tls's maxHandshake
	handshakeHeader   = 4     // message type and uint24 length
	typeClientHello   = 1
	extensionSNI      = 0
	sniHostName       = 0
	helloReadSize     = 2048 // one read holds a usual ClientHello (with a post-quantum key share)
	seenExtsOnStack   = 32   // duplicate extension check without a map for usual hellos
	maxPeekBufferSize = maxHelloLen + (maxHelloLen/maxRecordPlain+1)*recordHeaderLen + helloReadSize
)

// clientHello is what the gateway needs of a TLS ClientHello.
type clientHello struct {
	// ServerName is the host_name of the server_name extension; empty
	// when there is none.
	ServerName string
}

// peekClientHello reads a TLS ClientHello from r without answering it, and
// returns it together with every byte consumed, so that the bytes can be
// replayed to the upstream unchanged.
//
// It reads the handshake records and the server_name extension as
// crypto/tls's server does, and refuses what crypto/tls would refuse in
// them: a record that is not a handshake record or is oversized, a first
// message that is not a ClientHello, a length that does not match what it
// frames, a duplicated extension, two host names, an empty or dotted name.
// The other extensions are only framed, not interpreted: they are the
// upstream's to judge, and being length-delimited they cannot change which
// name the server_name extension holds. Parsing only this much, into one
// buffer, keeps the peek to a read or two and a few allocations per tunnel
// (a crypto/tls server handshake parses every extension and allocates
// kilobytes).
func peekClientHello(r io.Reader) (*clientHello, []byte, error) {
	p := helloReader{r: r, buf: make([]byte, 0, helloReadSize)}
	msg, err := p.readHandshakeMessage()
	if err != nil {
		return nil, p.buf, err
	}
	sni, err := parseClientHello(msg)
	if err != nil {
		return nil, p.buf, err
	}
	return &clientHello{ServerName: sni}, p.buf, nil
}

// helloReader reads TLS records into buf, which keeps every byte read.
type helloReader struct {
	r   io.Reader
	buf []byte
}

// fill reads until buf holds at least n bytes. It reads as much as is
// there (up to buf's spare capacity), so a ClientHello sent in one piece
// takes one read.
func (h *helloReader) fill(n int) error {
	for len(h.buf) < n {
		if n > maxPeekBufferSize {
			return errBadHello
		}
		if cap(h.buf)-len(h.buf) < n-len(h.buf) {
			grown := make([]byte, len(h.buf), n+helloReadSize)
			copy(grown, h.buf)
			h.buf = grown
		}
		m, err := h.r.Read(h.buf[len(h.buf):cap(h.buf)])
		h.buf = h.buf[:len(h.buf)+m]
		if len(h.buf) >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && len(h.buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// readHandshakeMessage reads handshake records until the first handshake
// message is complete, and returns it (header included). A message in one
// record is returned in place; one spread over several is copied together.
func (h *helloReader) readHandshakeMessage() ([]byte, error) {
	var (
		msg       []byte // the message so far, header included
		assembled bool   // msg is a copy gathered from several records
		off       int    // start of the next record in buf
	)
	for {
		if err := h.fill(off + recordHeaderLen); err != nil {
			return nil, err
		}
		hdr := h.buf[off : off+recordHeaderLen]
		// Only handshake records may carry a ClientHello; a version of
		// 16.0 or more is no TLS client (crypto/tls's first-record test).
		if hdr[0] != recordTypeHS || hdr[1] >= 0x10 {
			if off == 0 {
				return nil, errNotTLS
			}
			return nil, errBadHello
		}
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if n == 0 || n > maxRecordPlain {
			return nil, errBadHello
		}
		if err := h.fill(off + recordHeaderLen + n); err != nil {
			return nil, err
		}
		fragment := h.buf[off+recordHeaderLen : off+recordHeaderLen+n]
		off += recordHeaderLen + n
		switch {
		case msg == nil:
			msg = fragment
		case !assembled:
			msg = append(append(make([]byte, 0, len(msg)+len(fragment)), msg...), fragment...)
			assembled = true
		default:
			msg = append(msg, fragment...)
		}
		if len(msg) < handshakeHeader {
			continue
		}
		if msg[0] != typeClientHello {
			return nil, errBadHello
		}
		length := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if length > maxHelloLen {
			return nil, errBadHello
		}
		if len(msg) >= handshakeHeader+length {
			// Bytes behind the message (a client's next flight) stay in
			// buf, for the upstream, like everything else read.
			return msg[:handshakeHeader+length], nil
		}
	}
}

// parseClientHello returns the host name of a ClientHello message (header
// included), checking its framing as crypto/tls's clientHelloMsg.unmarshal
// does (with the same reader, cryptobyte).
func parseClientHello(msg []byte) (string, error) {
	s := cryptobyte.String(msg[handshakeHeader:])
	var sessionID, suites, compression cryptobyte.String
	if !s.Skip(2+32) || // legacy_version, random
		!s.ReadUint8LengthPrefixed(&sessionID) ||
		// crypto/tls reads the suites as whole uint16s: an odd length is
		// malformed.
		!s.ReadUint16LengthPrefixed(&suites) || len(suites)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&compression) {
		return "", errBadHello
	}
	if s.Empty() {
		return "", nil // no extensions
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return "", errBadHello
	}
	var (
		seen     [seenExtsOnStack]uint16
		nSeen    int
		seenMore map[uint16]bool
		name     string
	)
	for !exts.Empty() {
		var (
			typ  uint16
			data cryptobyte.String
		)
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", errBadHello
		}
		// crypto/tls refuses a hello with any extension twice.
		for _, t := range seen[:nSeen] {
			if t == typ {
				return "", errBadHello
			}
		}
		switch {
		case nSeen < len(seen):
			seen[nSeen] = typ
			nSeen++
		case seenMore[typ]:
			return "", errBadHello
		default:
			if seenMore == nil {
				seenMore = make(map[uint16]bool)
			}
			seenMore[typ] = true
		}
		if typ != extensionSNI {
			continue
		}
		var err error
		if name, err = parseServerName(data); err != nil {
			return "", err
		}
	}
	return name, nil
}

// parseServerName reads a server_name extension (RFC 6066, 3): a
// non-empty list of typed, non-empty names, of which at most one is a
// host_name, which may not end in a dot; other name types are skipped.
func parseServerName(data cryptobyte.String) (string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || list.Empty() || !data.Empty() {
		return "", errBadHello
	}
	var name string
	for !list.Empty() {
		var (
			typ uint8
			n   cryptobyte.String
		)
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&n) || n.Empty() {
			return "", errBadHello
		}
		if typ != sniHostName {
			continue
		}
		if name != "" {
			return "", errBadHello
		}
		name = string(n)
		if strings.HasSuffix(name, ".") {
			return "", fmt.Errorf("%w: the server name ends in a dot", errBadHello)
		}
	}
	return name, nil
}

// tlsAlertAccessDenied is a fatal TLS alert record (access_denied, 49): the
// one thing a tunnel refused after its 200 can still tell a TLS client.
const tlsAlertAccessDenied = "\x15\x03\x03\x00\x02\x02\x31"
