package sdn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// Several controllers share the switches with OpenFlow roles. With
// Config.Roles set, the controller asks every switch for the role SetRole
// gave it (SLAVE until then), with the generation_id of the election that
// made it so; it converges a switch, and so withdraws or restores steering
// (fail-open), only once the switch confirmed it MASTER. A switch that
// refuses the generation as stale has seen a newer master: the controller
// stays slave on it, with the switch's own generation, until its election
// gives it a new one. Without Config.Roles no role is ever requested and
// the controller is the switches' one (EQUAL) controller, as it always was.

// RoleStatus is the controller's role as the election set it.
type RoleStatus struct {
	// Enabled is Config.Roles; the rest is meaningless without it.
	Enabled    bool
	Role       string // "master" or "slave"
	Generation uint64
	Since      time.Time
}

// SetRole makes the controller master or slave with the generation_id
// of its election. Every connected switch is asked for the new role at
// once; a new master converges each switch (sending nothing when its
// flows already match), a new slave stops sending anything but reads.
func (c *Controller) SetRole(role ofp13.ControllerRole, generation uint64) error {
	if role != ofp13.RoleMaster && role != ofp13.RoleSlave {
		return fmt.Errorf("role %s: only master and slave are elected", role)
	}
	c.mu.Lock()
	changed := c.role != role
	if changed || c.generation != generation {
		c.role, c.generation = role, generation
		if changed {
			c.roleSince = time.Now()
		}
		c.kickLocked()
	}
	c.mu.Unlock()
	if changed {
		c.log.Info("controller role", "role", role.String(), "generation", generation)
	}
	return nil
}

// Role returns the role the election set.
func (c *Controller) Role() RoleStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return RoleStatus{Enabled: c.cfg.Roles, Role: c.role.String(), Generation: c.generation, Since: c.roleSince}
}

// sessionRole is what a switch confirmed of this controller's role.
type sessionRole struct {
	// role and generation are the switch's last answer; role is 0
	// (nochange) before the first.
	role       ofp13.ControllerRole
	generation uint64
	// refused is the generation the switch refused as stale for master:
	// it is not asked again with it.
	refused uint64
}

// roleSink hands the switch's role status messages to its session, which
// exists only once the handshake is done.
type roleSink struct{ s atomic.Pointer[session] }

func (c *Controller) onRoleStatus(sink *roleSink, m *ofp13.RoleStatus) {
	s := sink.s.Load()
	if s == nil {
		return
	}
	c.counters.roleStatus.Add(1)
	if !c.cfg.Roles {
		// No role was asked for, so none can change: a switch that says
		// otherwise is ignored (each kick is a whole convergence, and a
		// switch could send these back to back).
		s.conn.limitedWarn("switch sent a role status, though this controller asks for no role; ignored",
			"switch_remote", s.conn.RemoteAddr(), "to", m.Role.String(), "reason", m.Reason.String())
		return
	}
	c.mu.Lock()
	old := s.role.role
	s.role.role, s.role.generation = m.Role, m.GenerationID
	changed := old != m.Role
	if changed {
		signal(s.kick)
	}
	c.mu.Unlock()
	if changed {
		s.conn.limitedWarn("switch changed this controller's role", "switch_remote", s.conn.RemoteAddr(),
			"from", old.String(), "to", m.Role.String(), "reason", m.Reason.String(), "switch_generation", m.GenerationID)
	}
}

// ensureRole asks the switch of s for the role the election set, unless
// it confirmed that role already, and reports whether the controller may
// change the switch's flows.
func (c *Controller) ensureRole(ctx context.Context, s *session, name string, log *slog.Logger) (bool, error) {
	if !c.cfg.Roles {
		return true, nil
	}
	c.mu.Lock()
	want, gen, have := c.role, c.generation, s.role
	c.mu.Unlock()
	if want == ofp13.RoleMaster && have.refused == gen && gen != 0 {
		return false, nil // this generation is stale on the switch; wait for a new one
	}
	if have.role == want && (have.generation == gen || want == ofp13.RoleSlave) {
		return want == ofp13.RoleMaster, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Keepalive+time.Second)
	defer cancel()
	got, err := c.requestRole(ctx, s, want, gen)
	if err == nil {
		role := c.setSessionRole(s, name, got, sessionRole{role: got.Role, generation: got.GenerationID})
		log.Info("switch confirmed role", "role", got.Role.String(), "generation", got.GenerationID)
		return role == ofp13.RoleMaster, nil
	}
	var swErr *ofp13.Error
	if !errors.As(err, &swErr) || swErr.Type != ofp13.ErrorTypeRoleRequestFailed || swErr.Code != ofp13.RoleRequestFailedStale {
		c.setError(name, fmt.Errorf("role request %s: %w", want, err))
		log.Warn("role request failed", "role", want.String(), "generation", gen, "err", err)
		return false, err
	}
	// Stale: the switch saw a larger generation, so a newer master
	// exists (or etcd lost its data). Learn the switch's generation and
	// be slave with it.
	c.counters.roleRefusals.Add(1)
	cur, err := c.requestRole(ctx, s, ofp13.RoleNoChange, 0)
	if err != nil {
		return false, fmt.Errorf("role query after a stale %s request: %w", want, err)
	}
	if want == ofp13.RoleMaster {
		log.Error("switch refused this controller as master: its generation is newer, so another controller leads (or etcd's data was reset); staying slave on it",
			"generation", gen, "switch_generation", cur.GenerationID)
		c.setError(name, fmt.Errorf("master refused: generation %d is older than the switch's %d (if no other controller leads, etcd lost or restored its data: set cluster generation_base above %d and reload)",
			gen, cur.GenerationID, cur.GenerationID))
	}
	got, err = c.requestRole(ctx, s, ofp13.RoleSlave, cur.GenerationID)
	if err != nil {
		return false, fmt.Errorf("slave request with the switch's generation %d: %w", cur.GenerationID, err)
	}
	sr := sessionRole{role: got.Role, generation: got.GenerationID}
	if want == ofp13.RoleMaster {
		sr.refused = gen
	}
	c.setSessionRole(s, name, got, sr)
	return false, nil
}

func (c *Controller) requestRole(ctx context.Context, s *session, role ofp13.ControllerRole, gen uint64) (*ofp13.RoleReply, error) {
	c.counters.roleRequests.Add(1)
	replies, err := s.conn.Request(ctx, &ofp13.RoleRequest{Role: role, GenerationID: gen})
	if err != nil {
		return nil, err
	}
	if len(replies) != 1 {
		return nil, fmt.Errorf("role request: %d replies", len(replies))
	}
	r, ok := replies[0].(*ofp13.RoleReply)
	if !ok {
		return nil, fmt.Errorf("role request answered with %s", replies[0].MessageType())
	}
	return r, nil
}

// setSessionRole records the role the switch's reply gave s, and returns
// the role in force: a ROLE_STATUS of a newer generation read since (the
// switch made another controller master right after it answered) is not
// overwritten by the older reply, and the session is kicked to act on it.
func (c *Controller) setSessionRole(s *session, name string, got *ofp13.RoleReply, sr sessionRole) ofp13.ControllerRole {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.role.role != 0 && int64(sr.generation-s.role.generation) < 0 {
		signal(s.kick)
		return s.role.role
	}
	s.role = sr
	if st := c.status[name]; st != nil && c.sessions[name] == s {
		st.Role, st.RoleGeneration = got.Role.String(), got.GenerationID
	}
	return sr.role
}

// mayWrite reports whether s may change its switch's flows: always
// without roles, as confirmed master with them.
func (c *Controller) mayWrite(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.cfg.Roles || (c.role == ofp13.RoleMaster && s.role.role == ofp13.RoleMaster)
}
