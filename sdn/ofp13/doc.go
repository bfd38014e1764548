// Package ofp13 encodes and decodes OpenFlow 1.3 (wire version 0x04)
// messages. It is a pure codec: no I/O, no logging, no goroutines.
//
// Every message is a struct with MarshalBinary, AppendBinary and
// UnmarshalBinary; Unmarshal decodes any message by its type and returns
// message types it does not model as *Raw rather than dropping them. Match
// fields, instructions, actions and multipart bodies it does not model are
// kept raw in the same way, so whatever decodes re-encodes. Every length is
// checked before it is read, and every malformed input yields a *DecodeError
// that names the structure, the byte offset and the kind of fault.
package ofp13
