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
// # Protocol version 2
//
// Version 2 changes the stream handshake of version 1 (a PSK-MAC'd hello,
// reply and confirm with keys derived from the PSK and public nonces) in
// three ways: the keys come from an ephemeral X25519 exchange, so a PSK
// that leaks later decrypts nothing recorded before; the hello names its
// initiator and the responder it is meant for, so a stream cannot be
// reflected to its sender or redirected to another agent; and the responder
// takes the session's shape from its own whitelist entry and refuses a
// hello that announces another, so no peer chooses what it allocates. The
// frame format and sealing are those of version 1. The handshake is modelled
// on the Noise NNpsk0 pattern (a PSK-authenticated ee exchange) but is not
// Noise: its transcript is the exact hello and reply bytes.
//
// Byte credit (CREDIT, below) replaced queue length x streams as the flow
// control. Later steps of version 2 add frame types for acknowledgement,
// joins of replacement streams and pooled streams bound to a session; they
// are listed under "Reserved" below, and an agent of this build aborts a
// session that receives one.
//
// # Handshake (per stream)
//
// K_auth = HKDF-SHA256(secret=PSK, salt="", info="sosappliance v2 handshake
// auth", 32 bytes). MACs are HMAC-SHA256. Every message starts with the
// same 8-byte preamble: magic "SOSt", version (2), message kind (1 hello,
// 2 reply), one kind-specific byte, then flags (0).
//
// Hello, initiator -> responder, 264 bytes:
//
//	off len field
//	  0   4 magic "SOSt"
//	  4   1 version (2)
//	  5   1 kind (1 hello)
//	  6   1 mode: 0 none, 1 aes-256-gcm
//	  7   1 flags (0)
//	  8  64 initiator name: length (1..63), UTF-8 bytes, zero padding
//	 72  64 responder name, likewise: the agent this hello is meant for
//	136  32 initiator ephemeral X25519 public key (fresh per stream)
//	168  16 session id (random)
//	184   2 stream index (< stream count)
//	186   2 stream count (>= 1)
//	188   4 chunk size (1 .. 16 MiB)
//	192   4 queue length: 0, or a bound on the receive window (below)
//	196  18 original client address and port
//	214  18 original server address and port
//	232  32 MAC(K_auth, "sos v2 hello" || bytes 0..232)
//
// Reply, responder -> initiator, 72 bytes:
//
//	off len field
//	  0   4 magic "SOSt"
//	  4   1 version (2)
//	  5   1 kind (2 reply)
//	  6   1 status: 0 accepted, else the refusal reason (see Status)
//	  7   1 flags (0)
//	  8  32 responder ephemeral X25519 public key (zero in a refusal)
//	 40  32 MAC(K_auth, "sos v2 reply" || hello (264) || bytes 0..40)
//
// Keys: th = SHA-256(hello || reply); dh = X25519(own ephemeral, peer's);
// okm = HKDF-SHA256(secret = dh || PSK, salt = th, info = "sosappliance v2
// stream keys", 96 bytes): bytes 0..32 are the confirm key, 32..64 key the
// Up direction, 64..96 the Down direction. Both ephemeral private keys are
// dropped once the keys are derived.
//
// Confirm, initiator -> responder, 32 bytes: MAC(confirm key, "sos v2
// confirm" || th).
//
// The reply proves the responder holds the PSK and saw this hello; the
// confirm proves the initiator holds the PSK and the private key of its
// ephemeral, so a replayed hello never completes. Frames may follow the
// confirm immediately, and no byte of a stream reaches reassembly before its
// confirm is verified.
//
// The responder checks, in this order, and answers a MAC'd refusal for
// each: the responder name is its own (else StatusWrongResponder); the
// initiator key is not one of its own handshakes in flight
// (StatusReflected); the mode is its own; a server-side whitelist entry of
// its own matches the client and server (StatusNotWhitelisted; an agent's
// client-side routes never admit a session); the initiator is that entry's
// client-side agent (StatusUnknownInitiator); streams, chunk size and
// queue length equal the entry's (StatusShapeMismatch); then its limits. A
// responder that cannot verify a hello closes the connection without
// answering.
//
// Versions: a responder reads the 8-byte preamble first. A hello of another
// version is answered with the version refusal (a reply of 72 bytes whose
// status is StatusVersion and whose key and MAC are zero: it cannot be
// authenticated, so an initiator only reports it) and the connection is
// closed. A version 1 initiator reads those 72 bytes as a reply and fails
// with "unsupported version: 2". A version 1 responder closes without an
// answer on a version 2 hello; the version 2 initiator reports that the
// peer closed the handshake (wrong PSK or version 1).
//
// Each stream has its own exchange and therefore its own keys: a frame
// moved from one stream to another fails to open.
//
// # Frames
//
// Header, 16 bytes:
//
//	off len field
//	  0   1 type: 1 DATA, 2 FIN, 3 ABORT, 4 CREDIT (5..7 reserved, see below)
//	  1   1 flags (0)
//	  2   2 stream index (must be the index of the stream it arrives on)
//	  4   4 body length
//	  8   8 sequence number
//
// Body: DATA carries 1 .. chunk-size payload bytes. FIN carries the total
// number of payload bytes of the direction (8 bytes); its sequence number is
// the number of DATA frames before it, so it also states the chunk count.
// ABORT carries a UTF-8 reason of at most 256 bytes and always has sequence
// number 2^64-1, outside the data sequence. CREDIT carries the cumulative
// credit of the direction opposite to the one it travels in (8 bytes,
// below).
//
// Sequence spaces: DATA and FIN numbers lie below 2^63. Control frames
// (CREDIT) lie in [2^63, 2^64-1): each stream numbers the control frames
// it sends in its direction 2^63 + 0, 2^63 + 1, ... by one, so the nonce
// of a control frame never meets a data nonce or another control nonce,
// and the receiver refuses a control frame whose number is not exactly
// the next of its stream (replays, drops and reordering are visible).
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
// # Flow control: byte credit
//
// The receiver of a direction grants its sender credit in bytes, as a
// cumulative count: "you may have sent DATA frames worth up to C bytes".
// Every DATA frame consumes chunk-size bytes of credit, whatever its
// payload length, because the receiver holds every frame in a chunk-size
// buffer; in a bulk transfer, where frames are full, C is the payload
// offset the sender may reach. So the sender may send DATA frame s only
// while (s + 1) x chunk size <= C. FIN consumes no credit. Before any
// CREDIT arrives a sender holds the initial credit of the session's shape
// (InitialCredit: 4 MiB of chunks, at least one chunk per stream, at most
// 2^20 frames), which both ends compute alike, so data starts at once.
//
// CREDIT body (8 bytes): the cumulative credit C, in bytes. It may travel
// on any stream of the session. On each stream the credit never goes
// backwards (a credit below that stream's previous one aborts); across
// streams credits may overtake each other, and the sender's limit is the
// largest it received. A credit more than 2^34 bytes (MaxCreditAhead)
// beyond the DATA frames the sender has sent (frames x chunk size) is
// absurd, since no receiver's memory holds that window, and aborts the
// session. The credit only lets a sender send; it never sizes anything
// the sender allocates. A DATA frame beyond the credit the receiver
// granted, or a FIN numbered beyond it, aborts the session.
//
// The receiver sizes its window (granted credit minus what it delivered
// to its end host) from what it measures, as Linux autotunes a receive
// buffer: it starts at the initial credit and grows while the window is
// what limits the session, checked at most once per round trip (the
// largest smoothed RTT of its streams, TCP_INFO): its sender used the
// credit it had (a frame at the grant arrived, the frames received reach
// the grant announced a round trip before, or half a window of frames
// arrived within a round trip) and delivery to the end host ran dry
// meanwhile. Each growth at most doubles the window, and never takes it
// beyond four times the highest recent arrival rate (frames read from the
// streams in any order) x that RTT, nor beyond its session memory cap, the
// agent's memory cap, 2^20 frames and, when the hello's queue length is
// not 0, queue length x streams frames (never below the initial window).
// A session limited by its end host never runs dry and does not grow. The
// window never shrinks within a session. It grants new credit once it can
// extend the grant by a quarter of its window. None of this is on the
// wire: a receiver may size its window any way within these rules.
//
// # Ordering and the reorder window
//
// The sender puts each frame on whichever stream can take it, so sequence
// numbers increase strictly along each stream but not by one. The receiver
// delivers in sequence order through its window (Reassembler), which holds
// every frame the credit allows. The Reassembler also keeps the pause rule
// of version 1 as a second bound: a stream is read while the last sequence
// number read from it is below next-expected + window, and paused
// otherwise; the stream holding next-expected has read nothing at or
// beyond it, so it is never paused and the window cannot deadlock. At most
// window + streams frames are ever held. A DATA frame is never dropped:
// anything that breaks the rules
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
//
// # Reserved for the next steps of version 2
//
// These frame types are assigned and not yet sent; this build treats them
// as a protocol violation. Like CREDIT, they will number themselves in the
// control space of their stream.
//
//   - 5 ACK: the highest sequence delivered to the end host, so the sender
//     frees those chunks and resends unacknowledged ones on surviving
//     streams when a stream dies; duplicates are dropped by sequence.
//   - 6 JOIN (initiator, first frame on a new stream): attach a
//     replacement stream to a running session.
//   - 7 BIND (initiator, first frame on a pooled idle stream): bind the
//     stream to a new session; the frame keys of the session on that
//     stream are derived from the stream's secret and the bind's fresh
//     nonce, so no key serves two sessions.
package stripe
