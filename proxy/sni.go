package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// errHelloRead stops the TLS handshake as soon as the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// errNotTLS reports a tunnel whose first bytes are not a TLS handshake.
var errNotTLS = errors.New("not a TLS ClientHello")

// peekClientHello reads a TLS ClientHello from r without answering it, and
// returns it together with every byte consumed, so that the bytes can be
// replayed to the upstream unchanged. crypto/tls does the parsing: it is
// handed a connection that can only read and that records what it read.
func peekClientHello(r io.Reader) (*tls.ClientHelloInfo, []byte, error) {
	var first [1]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		return nil, nil, err
	}
	recorded := bytes.NewBuffer(make([]byte, 0, 1024))
	recorded.WriteByte(first[0])
	if first[0] != 0x16 { // TLS record type: handshake
		return nil, recorded.Bytes(), errNotTLS
	}
	conn := &readOnlyConn{r: io.TeeReader(r, recorded), pre: first[:]}
	var hello *tls.ClientHelloInfo
	err := tls.Server(conn, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = new(tls.ClientHelloInfo)
			*hello = *h
			return nil, errHelloRead
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = errNotTLS
		}
		return nil, recorded.Bytes(), err
	}
	return hello, recorded.Bytes(), nil
}

// readOnlyConn feeds crypto/tls during peekClientHello; writes are refused
// so that no alert or ServerHello ever reaches the client from the peek.
type readOnlyConn struct {
	r   io.Reader
	pre []byte
}

func (c *readOnlyConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.r.Read(p)
}
func (c *readOnlyConn) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (c *readOnlyConn) Close() error                     { return nil }
func (c *readOnlyConn) LocalAddr() net.Addr              { return nil }
func (c *readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (c *readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c *readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// tlsAlertAccessDenied is a fatal TLS alert record (access_denied, 49): the
// one thing a tunnel refused after its 200 can still tell a TLS client.
const tlsAlertAccessDenied = "\x15\x03\x03\x00\x02\x02\x31"
