package ofp13

import "fmt"

// ControllerRole is a controller's role on a switch (ofp_controller_role).
type ControllerRole uint32

// Controller roles. A switch has at most one MASTER; SLAVE controllers may
// read but not modify its state; EQUAL is every controller's role until it
// asks for another.
const (
	RoleNoChange ControllerRole = 0
	RoleEqual    ControllerRole = 1
	RoleMaster   ControllerRole = 2
	RoleSlave    ControllerRole = 3
)

var roleNames = [...]string{"nochange", "equal", "master", "slave"}

// String is the role as ovs-ofctl prints it ("master", "slave", ...).
func (r ControllerRole) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role%d", uint32(r))
}

// Codes of ErrorTypeRoleRequestFailed (ofp_role_request_failed_code).
const (
	// RoleRequestFailedStale: the generation_id of a MASTER or SLAVE
	// request is older than one the switch has seen.
	RoleRequestFailedStale uint16 = 0
	// RoleRequestFailedUnsup: the switch cannot change roles.
	RoleRequestFailedUnsup uint16 = 1
	// RoleRequestFailedBadRole: no such role.
	RoleRequestFailedBadRole uint16 = 2
)

func init() {
	errorCodeNames[ErrorTypeRoleRequestFailed] = []string{"OFPRRFC_STALE", "OFPRRFC_UNSUP", "OFPRRFC_BAD_ROLE"}
}

// roleBodyLen is role, pad[4] and generation_id.
const roleBodyLen = 16

// RoleRequest asks the switch for a role (OFPT_ROLE_REQUEST). For MASTER
// and SLAVE the switch compares GenerationID with the largest it has seen,
// as a signed 64-bit distance, and refuses an older one with
// OFPRRFC_STALE; for EQUAL and NOCHANGE it ignores it.
type RoleRequest struct {
	XID          uint32
	Role         ControllerRole
	GenerationID uint64
}

func (m *RoleRequest) MessageType() Type              { return TypeRoleRequest }
func (m *RoleRequest) TransactionID() uint32          { return m.XID }
func (m *RoleRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *RoleRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *RoleRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendRole(b, TypeRoleRequest, m.XID, m.Role, m.GenerationID)
}
func (m *RoleRequest) UnmarshalBinary(data []byte) error {
	xid, role, gen, err := unmarshalRole(data, TypeRoleRequest)
	*m = RoleRequest{XID: xid, Role: role, GenerationID: gen}
	return err
}

// RoleReply is the switch's answer to a RoleRequest (OFPT_ROLE_REPLY): the
// role the controller now has and the switch's generation_id.
type RoleReply struct {
	XID          uint32
	Role         ControllerRole
	GenerationID uint64
}

func (m *RoleReply) MessageType() Type              { return TypeRoleReply }
func (m *RoleReply) TransactionID() uint32          { return m.XID }
func (m *RoleReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *RoleReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *RoleReply) AppendBinary(b []byte) ([]byte, error) {
	return appendRole(b, TypeRoleReply, m.XID, m.Role, m.GenerationID)
}
func (m *RoleReply) UnmarshalBinary(data []byte) error {
	xid, role, gen, err := unmarshalRole(data, TypeRoleReply)
	*m = RoleReply{XID: xid, Role: role, GenerationID: gen}
	return err
}

func appendRole(b []byte, t Type, xid uint32, role ControllerRole, gen uint64) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, t, xid)
	b = appendU32(b, uint32(role))
	b = appendZeros(b, 4)
	b = appendU64(b, gen)
	return finishMessage(b, start)
}

func unmarshalRole(data []byte, t Type) (uint32, ControllerRole, uint64, error) {
	d, xid, err := open13(data, t)
	if err != nil {
		return 0, 0, 0, err
	}
	role := ControllerRole(d.u32())
	d.skip(4)
	gen := d.u64()
	d.end()
	return xid, role, gen, d.err
}

// ONF experimenter message carrying OpenFlow 1.4's role status to an
// OpenFlow 1.3 controller (ONF extension 191, as Open vSwitch sends it).
const (
	ExperimenterONF uint32 = 0x4f4e4600
	ONFRoleStatus   uint32 = 1911
)

// RoleStatusReason is why a switch changed a controller's role
// (ofp14_controller_role_reason).
type RoleStatusReason uint8

// Role status reasons.
const (
	// RoleReasonMasterRequest: another controller asked to be master, so
	// this one was made slave.
	RoleReasonMasterRequest RoleStatusReason = 0
	// RoleReasonConfig: the switch's configuration changed the role.
	RoleReasonConfig RoleStatusReason = 1
	// RoleReasonExperimenter: an experimenter reason.
	RoleReasonExperimenter RoleStatusReason = 2
)

func (r RoleStatusReason) String() string {
	switch r {
	case RoleReasonMasterRequest:
		return "master_request"
	case RoleReasonConfig:
		return "configuration_changed"
	case RoleReasonExperimenter:
		return "experimenter_data_changed"
	}
	return fmt.Sprintf("reason%d", uint8(r))
}

// roleStatusLen is the whole message: header, experimenter and exp_type,
// role, reason, pad[3], generation_id.
const roleStatusLen = HeaderLen + 8 + 16

// RoleStatus tells a controller that the switch changed its role without
// being asked by it, typically because another controller became master
// (ONFT_ROLE_STATUS, an OFPT_EXPERIMENTER message in OpenFlow 1.3).
type RoleStatus struct {
	XID          uint32
	Role         ControllerRole
	Reason       RoleStatusReason
	GenerationID uint64
}

func (m *RoleStatus) MessageType() Type              { return TypeExperimenter }
func (m *RoleStatus) TransactionID() uint32          { return m.XID }
func (m *RoleStatus) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *RoleStatus) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *RoleStatus) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypeExperimenter, m.XID)
	b = appendU32(b, ExperimenterONF)
	b = appendU32(b, ONFRoleStatus)
	b = appendU32(b, uint32(m.Role))
	b = append(b, byte(m.Reason), 0, 0, 0)
	b = appendU64(b, m.GenerationID)
	return finishMessage(b, start)
}
func (m *RoleStatus) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypeExperimenter)
	if err != nil {
		return err
	}
	d.what = "onf_role_status"
	if exp, typ := d.u32(), d.u32(); d.err == nil && (exp != ExperimenterONF || typ != ONFRoleStatus) {
		return &DecodeError{What: "onf_role_status", Offset: HeaderLen, Err: ErrWrongType,
			Detail: fmt.Sprintf("experimenter %#x type %d", exp, typ)}
	}
	*m = RoleStatus{XID: xid, Role: ControllerRole(d.u32()), Reason: RoleStatusReason(d.u8())}
	d.skip(3)
	m.GenerationID = d.u64()
	d.end()
	return d.err
}

// isRoleStatus reports whether an OFPT_EXPERIMENTER message is an ONF role
// status, by its experimenter id and type.
func isRoleStatus(data []byte) bool {
	return len(data) >= HeaderLen+8 && be32(data[HeaderLen:]) == ExperimenterONF && be32(data[HeaderLen+4:]) == ONFRoleStatus
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
