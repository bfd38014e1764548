// Package stripe is the wire codec of the striping protocol spoken between a
// client-side and a server-side sosappliance agent: the stream handshake, the
// key schedule, frame headers, frame sealing and the reorder window. It is
// pure: no I/O, no goroutines, no logging; the relay package drives it.
//
// # Sessions and streams
//
// One accelerated TCP connection is one session. The client-side agent (the
// initiator) opens N TCP connections ("streams") to the server-side agent (the
// responder). Each stream runs the handshake below and then carries frames in
// both directions. Direction Up is initiator -> responder (client -> server),
// Down is responder -> initiator. Each direction numbers its frames with one
// 64-bit sequence shared by all streams of the session, starting at 0.
//
// All integers are big-endian. Addresses are 16 bytes (IPv4 as IPv4-mapped
// IPv6) followed by a 2-byte port.
//
// # Handshake (per stream)
//
// The handshake key is K_hs = HKDF-SHA256(secret=PSK, salt="",
// info="sosappliance handshake v1", 32 bytes). MACs are HMAC-SHA256 with K_hs.
//
// Hello, initiator -> responder, 136 bytes:
//
//	off len field
//	  0   4 magic "SOSt"
//	  4   1 version (1)
//	  5   1 mode: 0 none, 1 aes-256-gcm
//	  6   2 stream index (< stream count)
//	  8   2 stream count (>= 1)
//	 10   2 flags (0)
//	 12   4 chunk size (1 .. 16 MiB)
//	 16   4 queue length (>= 1)
//	 20  16 session id (random)
//	 36  18 original client address and port
//	 54  18 original server address and port
//	 72  32 initiator nonce (random)
//	104  32 MAC over "sos hello v1" || bytes 0..104
//
// Reply, responder -> initiator, 72 bytes:
//
//	off len field
//	  0   4 magic "SOSt"
//	  4   1 version (1)
//	  5   1 status: 0 accepted, else the refusal reason (see Status)
//	  6   2 flags (0)
//	  8  32 responder nonce (random)
//	 40  32 MAC over "sos reply v1" || hello (136) || bytes 0..40
//
// Confirm, initiator -> responder, 32 bytes: MAC over "sos confirm v1" ||
// hello || reply.
//
// The reply proves the responder knows the PSK and saw this hello; the
// confirm proves the initiator knows the PSK and saw the responder's fresh
// nonce, so a replayed hello never completes. A responder that cannot verify
// a hello closes the connection without answering; a refusal is answered
// with a MAC'd reply so the initiator can trust the reason. Frames may follow
// the confirm immediately. No byte of a stream reaches reassembly before its
// confirm is verified.
//
// # Keys
//
// Each stream has its own pair of keys, bound to the session:
//
//	HKDF-SHA256(secret=PSK, salt=session id,
//	            info="sosappliance stripe v1 keys" || stream index (2) ||
//	            initiator nonce || responder nonce, 64 bytes)
//
// Bytes 0..32 key the Up direction, 32..64 the Down direction. Because the
// keys differ per stream, a frame moved from one stream to another fails to
// open.
//
// # Frames
//
// Header, 16 bytes:
//
//	off len field
//	  0   1 type: 1 DATA, 2 FIN, 3 ABORT
//	  1   1 flags (0)
//	  2   2 stream index (must be the index of the stream it arrives on)
//	  4   4 body length
//	  8   8 sequence number
//
// Body: DATA carries 1 .. chunk-size payload bytes. FIN carries the total
// number of payload bytes of the direction (8 bytes); its sequence number is
// the number of DATA frames before it, so it also states the chunk count.
// ABORT carries a UTF-8 reason of at most 256 bytes and always has sequence
// number 2^64-1, outside the data sequence.
//
// With mode aes-256-gcm every body is sealed with AES-256-GCM under the key of
// its stream and direction; the nonce is direction (4 bytes: 0 Up, 1 Down) ||
// sequence number (8 bytes); the 16-byte header is the associated data; the
// 16-byte tag follows the ciphertext and is counted in the body length.
// Tampering, injection and splicing fail to open; a replayed frame opens but
// is refused by the per-stream increasing sequence rule before it reaches
// delivery. With mode none the body is plaintext and only the handshake is
// authenticated: replays and duplicates are still refused by the sequence
// rules, but altered or injected bodies are not detected.
//
// # Ordering and the reorder window
//
// The sender puts each frame on whichever stream can take it, so sequence
// numbers increase strictly along each stream but not by one. The receiver
// delivers in sequence order through a window of queue length x stream count
// frames (Reassembler). A stream is read while the last sequence number read
// from it is below next-expected + window, and paused otherwise; the stream
// holding next-expected has read nothing at or beyond it, so it is never
// paused and the window cannot deadlock. At most window + streams frames are
// ever held. A DATA frame is never dropped: anything that breaks the rules
// (replay, duplicate, stale or post-FIN sequence, a stream index mismatch, a
// frame that fails to open, a missing frame that no stream can still carry
// because every stream ended or read past it) aborts the session.
//
// # Half-close and abort
//
// End of input from an end host becomes a FIN frame; after it the sender
// half-closes every stream in that direction. The receiver writes every chunk
// before the FIN, checks the byte count, then half-closes toward its end
// host. If every stream of a direction ends before the FIN is delivered the
// transfer was truncated and the session aborts. ABORT is sent on the
// surviving streams when a session fails, each of them then half-closed and
// reset a moment later; both agents reset (RST) their end-host connections
// at once, so a truncated transfer never looks complete.
package stripe
