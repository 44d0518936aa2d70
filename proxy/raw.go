package proxy

import (
	"context"
)

// modeRaw is the decision mode of a raw tunnel (raw_ports).
const modeRaw = "raw"

// openRaw relays an admitted CONNECT tunnel on one of its entry's
// raw_ports as it is: no ClientHello is required (SSH's server speaks
// first), nothing is intercepted and no credential is injected. The host
// and every address were judged as for any tunnel; the guard dials only
// those. Bytes the client already sent (behind the CONNECT, or read while
// telling a transparent connection's protocol apart) go first.
func (s *Server) openRaw(ss *session, early []byte, t target, adm admission) {
	d := ss.d
	d.mode = modeRaw
	ctx, cancel := context.WithTimeout(context.Background(), adm.timeouts.Dial)
	upstream, err := adm.guard.Dial(ctx, adm.dest)
	cancel()
	if err != nil {
		d.refuse(classifyUpstream(err, t.host))
		ss.end()
		return
	}
	d.setUpstream(upstream)
	if len(early) > 0 {
		if _, err := upstream.Write(early); err != nil {
			upstream.Close()
			d.refuse(classifyUpstream(err, t.host))
			ss.end()
			return
		}
		d.addIn(int64(len(early)))
	}
	s.relay(ss, upstream, adm.timeouts.TunnelIdle)
}
