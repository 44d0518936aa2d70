package proxy

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// newStdLogger routes net/http's and goproxy's own messages into zerolog at
// warn level, so the gateway has one log stream.
func newStdLogger(l zerolog.Logger) *log.Logger {
	return log.New(zerologWriter{l: l}, "", 0)
}

type zerologWriter struct{ l zerolog.Logger }

func (w zerologWriter) Write(p []byte) (int, error) {
	w.l.Warn().Str("component", "http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
