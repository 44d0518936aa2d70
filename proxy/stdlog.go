package proxy

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// stdLogger routes net/http's and goproxy's own messages into zerolog at
// warn level, so the gateway has one log stream. Their text is not ours (it
// may quote an error that quotes a peer's bytes), so it passes the
// redactor like every decision record.
func (s *Server) stdLogger() *log.Logger {
	return log.New(zerologWriter{l: s.log, redact: s.sink.redact}, "", 0)
}

type zerologWriter struct {
	l      zerolog.Logger
	redact *redactor
}

func (w zerologWriter) Write(p []byte) (int, error) {
	w.l.Warn().Str("component", "http").Msg(w.redact.scrubber().Text(strings.TrimSpace(string(p))))
	return len(p), nil
}
