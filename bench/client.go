//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"time"
)

// A deliberately lean HTTP/1.1 client: fixed request bytes, a response
// parser that reads the status line, Content-Length/chunked framing and
// discards the body. The load generator shares its core with the upstream;
// the less it spends per request, the more the ratio says about the gateway
// rather than about net/http's client.

// conn is one keep-alive connection (plain, or TLS inside or outside a tunnel).
type conn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
	buf []byte
}

func newConn(c net.Conn, req []byte) *conn {
	return &conn{c: c, br: bufio.NewReaderSize(c, 16<<10), req: req, buf: make([]byte, 64<<10)}
}

// roundTrip sends the request and reads the whole response; it returns the
// body length.
func (k *conn) roundTrip() (int64, error) {
	if _, err := k.c.Write(k.req); err != nil {
		return 0, err
	}
	return readResponse(k.br, k.buf)
}

func (k *conn) close() { k.c.Close() }

func readResponse(br *bufio.Reader, buf []byte) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || string(line[9:12]) != "200" {
		return 0, fmt.Errorf("response %q", bytes.TrimSpace(line))
	}
	length, chunked := int64(-1), false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("content-length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		n, err := io.CopyBuffer(io.Discard, httputil.NewChunkedReader(br), buf)
		if err != nil {
			return n, err
		}
		// The chunked reader stops after the last chunk; the trailer section
		// (usually just the final CRLF) belongs to this response too, or
		// the next response on a keep-alive connection starts with it.
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return n, err
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				return n, nil
			}
		}
	case length >= 0:
		return discardN(br, length, buf)
	}
	return 0, errors.New("response without a length")
}

func discardN(r io.Reader, n int64, buf []byte) (int64, error) {
	var got int64
	for got < n {
		p := buf
		if rem := n - got; rem < int64(len(p)) {
			p = p[:rem]
		}
		m, err := r.Read(p)
		got += int64(m)
		if err != nil {
			if err == io.EOF && got == n {
				break
			}
			return got, err
		}
	}
	return got, nil
}

var dialer = net.Dialer{Timeout: 5 * time.Second}

// dialTunnel opens a CONNECT tunnel to target through the gateway.
func dialTunnel(ctx context.Context, gw, target string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, "tcp", gw)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	line, err := br.ReadSlice('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	if len(line) < 12 || string(line[9:12]) != "200" {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %q", bytes.TrimSpace(line))
	}
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("CONNECT: %w", err)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 { // the gateway never sends ahead, but be correct
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// dialTLS opens a TLS connection to the upstream, directly or (gw != "")
// through a CONNECT tunnel, and completes the handshake.
func dialTLS(ctx context.Context, gw, target string, cfg *tls.Config) (*tls.Conn, error) {
	var raw net.Conn
	var err error
	if gw != "" {
		raw, err = dialTunnel(ctx, gw, target)
	} else {
		raw, err = dialer.DialContext(ctx, "tcp", target)
	}
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return tc, nil
}

// dialHTTP opens a plain TCP connection to the gateway or to the upstream.
func dialHTTP(ctx context.Context, gw, target string) (net.Conn, error) {
	if gw != "" {
		return dialer.DialContext(ctx, "tcp", gw)
	}
	return dialer.DialContext(ctx, "tcp", target)
}

// getRequest is a GET for path on host: absolute-form through a forward
// proxy, origin-form otherwise.
func getRequest(host, path string, absolute bool) []byte {
	target := path
	if absolute {
		target = "http://" + host + path
	}
	return []byte("GET " + target + " HTTP/1.1\r\nHost: " + host +
		"\r\nUser-Agent: hookgate-bench/1\r\nAccept: */*\r\n\r\n")
}
