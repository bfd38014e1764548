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
// control. Acknowledgement (ACK), retransmission and joins of replacement
// streams (JOIN) make a session survive the loss of streams (see "Lost
// streams" below). BIND binds a pooled, already authenticated stream to a
// new session (see "Pooled streams" below).
//
// # Session start: stream 0 first, the others join
//
// A session starts on its stream 0. The initiator opens stream 0 with a
// fresh hello (or binds it from its warm pool, see BIND) and starts the
// session as soon as its handshake is done; the responder starts the
// session (connects to the server) as soon as stream 0's confirm is
// verified. Every other stream joins the running session as JOIN
// describes ("Lost streams" below), with the session key stream 0's
// handshake derived, so data flows half a round trip after stream 0's
// handshake whatever the stream count. The initiator runs at most a fixed
// number of handshakes at a time toward one responder (64, below the
// responder's pre-auth cap per source), so thousands of streams join in
// waves. A fresh hello for a stream other than 0 is accepted only while
// the session's stream 0 has not arrived (the session gathers, counted
// against the responder's bound of half-open sessions per source, and
// starts when stream 0 comes); once the session started, a fresh hello of
// it is refused (StatusDuplicateStream): its streams join.
//
// A session need not open all its streams: the stream count of the
// hello is the most it may use (the responder's whitelist takes it as
// the shape, and sizes its memory checks by it), and an initiator may
// keep slots empty and join them later, as one whose whitelist lets each
// session choose its stream count does (it opens a few, then more while
// they raise the session's rate). Slots never opened are not losses.
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
//	  7   1 flags: 0, 1 (JOIN: a replacement stream), or 2 (POOL: a
//	        pooled stream, see below)
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
// stream keys", 128 bytes): bytes 0..32 are the confirm key, 32..64 key the
// Up direction, 64..96 the Down direction, 96..128 the stream's session key
// (used only when the stream is stream 0 of a new session, see JOIN). Both
// ephemeral private keys are dropped once the keys are derived.
//
// Confirm, initiator -> responder, 32 bytes: MAC(confirm key, "sos v2
// confirm" || th).
//
// Per-agent keys (optional, no change on the wire): each agent also holds
// a static X25519 key pair of its own and the public keys of the agents
// it talks to. The streams the agent named I opens to the one named R
// then use, wherever "PSK" stands above and below, the pair key
// HKDF-SHA256(secret = X25519(own static, peer's static) || PSK, salt =
// "", info = "sosappliance v2 agent pair" || I || 0x00 || R, 32 bytes),
// which only I and R can derive: a holder of the PSK that is neither
// cannot pass for either of them. The responder reads the initiator's
// name from the hello before its MAC (the only field it reads
// unauthenticated) to choose the key; a name it has no key for, or a
// MAC that fails, is closed without an answer, as a wrong PSK is (so a
// hello meant for another agent, keyed for another pair, is closed too,
// where the PSK alone gets StatusWrongResponder). Both agents of a pair
// must use them or neither: one without closes the other's hellos, and
// the other reports that the peer closed the handshake.
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
//	  0   1 type: 1 DATA, 2 FIN, 3 ABORT, 4 CREDIT, 5 ACK, 6 JOIN, 7 BIND
//	  1   1 flags: 0, or on DATA and FIN 1 (RETRANSMIT, see "Lost streams")
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
// below). ACK carries how many frames (DATA and FIN) of the opposite
// direction were delivered to the end host (8 bytes). JOIN carries a
// 32-byte proof (below), BIND a 152-byte body (below).
//
// Sequence spaces: DATA and FIN numbers lie below 2^63. Control frames
// (CREDIT, ACK, JOIN, BIND) lie in [2^63, 2^64-1): each stream numbers the
// control frames it sends in its direction 2^63 + 0, 2^63 + 1, ... by one,
// all types in one count, so the nonce of a control frame never meets a
// data nonce or another control nonce, and the receiver refuses a control
// frame whose number is not exactly the next of its stream (replays,
// drops and reordering are visible).
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
// The receiver sizes its window (granted credit minus what it delivered to
// its end host) from what it measures, as Linux autotunes a receive buffer:
// it starts at the initial credit and grows while the window is what limits
// the session, checked at most once per round trip: its sender used the
// credit it had (a frame at the grant arrived, the frames received reach
// the grant announced a round trip before, or half a window of frames
// arrived within a round trip) and delivery to the end host ran dry
// meanwhile. The round trip is the longer of the largest smoothed RTT of
// its streams (TCP_INFO) and the credit's own round trip, which this
// implementation times as Linux times a receive window (from the window
// advertised to the data at its edge): from a grant to a sender that had
// used all its credit until the first frame beyond that sender's old grant
// arrives, the median of the last eight, a sample more than twice the RTT
// plus 20 ms being an end host's pause and dropped; until it knows either
// round trip it does not grow. On a short path the credit's trip through
// both agents' queues is several TCP round trips. Each growth at most
// doubles the window, and never takes it beyond four times the highest
// recent arrival rate (frames read from the streams in any order) x that
// round trip plus two chunks (at least 64 KiB) per stream (what a sender's
// sockets may hold unsent at the least TCP_NOTSENT_LOWAT this
// implementation sets), nor beyond its session memory cap, the agent's
// memory cap, 2^20 frames and, when the hello's queue length is not 0,
// queue length x streams frames (never below the initial window). A session
// limited by its end host never runs dry and does not grow. The window
// never shrinks within a session. It grants new credit once it can extend
// the grant by a quarter of its window. None of this is on the wire: a
// receiver may size its window any way within these rules.
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
// window + streams frames are ever held. A sender that keeps to its credit
// never sends beyond the window, so no stream of it is ever paused.
//
// An authenticated frame whose sequence was already delivered or is held
// is a duplicate and is dropped (the sender retransmitted it, see below):
// every authentic frame of a sequence carries the same chunk, so dropping
// a copy loses nothing, and a frame that fails to open aborts before it is
// compared with anything, so an attacker cannot use "duplicate" to
// suppress data. Anything else that breaks the rules (an unflagged frame
// below its stream's previous one, a post-FIN sequence or a second FIN, a
// stream index mismatch, a frame that fails to open) aborts the session.
//
// # Lost streams: acknowledgement, retransmission, joins
//
// ACK. The receiver of a direction acknowledges, cumulatively, the frames
// it delivered to its end host: ACK n means frames 0 .. n-1 (the FIN
// included once it is delivered) are out and never needed again. ACK is
// its own frame type, not a field of CREDIT, because the two move
// independently: the credit moves with the window, the acknowledgement
// with delivery. A receiver's ACK rides with whatever frames a stream
// writes next (a CREDIT, DATA) whenever delivery moved since the last ACK,
// and it wakes a writer for one once an eighth of its window, at most 16
// frames, was delivered since the last one (a sender judges a frame
// overdue by how long it stays unacknowledged, below), or when delivery
// runs dry with frames delivered and not acknowledged (at most one such
// ACK in 10 ms), so a sender whose retention is smaller than the
// receiver's window still progresses. When a stream is lost the current CREDIT and ACK go again
// on another (they may have been lost with it). Once a session is
// complete the final ACK goes on every stream it still has. On
// each stream ACKs never go backwards; an ACK of more frames than the
// sender has numbered (read from its end host, whether written to a stream
// yet or still queued for one) aborts; across streams the largest counts. No selective form is
// needed: a stream is a TCP connection, so what a live stream carries
// arrives, and the sender knows which stream carried each frame.
//
// Retention. The sender keeps every frame it sent until an ACK covers it.
// This memory is part of the session's cap: a session starts with a
// retention of SendBudget frames (its send buffers of before) and
// doubles it when it runs out, reserving the growth from its agent's
// memory cap, as long as retention and receive window together fit the
// session memory cap (SessionMemory, RetainFootprint). A sender whose
// retention is full waits for ACKs (it reads nothing more from its end
// host); it never drops a frame.
//
// Retransmission. A stream is lost when its connection fails (reset,
// error, keepalive failure, a clean end before the session finished) or
// when it stalls: the receiver's delivery waits past the stall timeout for
// a frame while later frames are held; the receiver then resets the
// streams that could still carry that frame (nothing read past it), those
// that received nothing since the wait began if any, or, when no stream
// could still carry it (it was resent), the streams that received nothing
// since the wait began. A stream is also lost when it goes silent
// under its writer: this implementation loses a stream whose TCP holds
// data for the peer (unacknowledged, or unsent behind a closed window)
// while its own timer (a retransmission timeout, two zero-window probes
// in a row) goes unanswered and no ACK comes, for the stall timeout,
// since a path that drops everything shows no gap to the receiver and
// keepalive does not probe a connection with data outstanding. The sender sends
// every retained frame that it had given the lost stream again, on the
// surviving streams, with FlagRetransmit, sealed under the key of the
// stream that carries it now (so no key ever seals two frames with one
// nonce: a replacement stream has fresh keys, and a frame is resent only
// on a stream that never sent it). A retransmitted frame may be numbered
// below its stream's previous frame; it does not move that stream's read
// position. Retransmitted frames lie within the credit already used.
//
// Head-of-line reinjection. A sender may also send a retained frame again
// while the stream that carried it is alive: when the frame holds the
// receiver's delivery (it is among the oldest unacknowledged frames) and
// is stuck on its stream (that stream is in loss recovery and the frame
// is overdue or still unsent, and the stream's TCP has not acknowledged
// it). This implementation times a frame from when all of it left its
// socket (a frame queued behind its stream's others is not lost; at 64
// stripes a 60000-byte frame can wait tens of milliseconds to leave),
// overdue being more than the stream's RTT plus a slack; and it also
// waits until the session would otherwise run out of credit or retention
// within a round trip, or the frame is overdue twice over (four times
// from its write while it is still queued): the stream's TCP usually
// repairs the loss first, and a copy sent before then only spends the
// path twice. It goes, with
// FlagRetransmit, on another stream that never sealed that sequence
// before (one key never seals two frames with one nonce); both copies are
// authentic, and whichever arrives second is dropped as a duplicate. The
// receiver cannot tell this from a retransmission after a loss and needs
// no rule of its own. How much a sender reinjects is its own choice (this
// implementation: each frame at most once, at most a tenth of what the
// session sent); the receiver's memory is unaffected, since a duplicate
// is dropped as soon as it is authenticated.
//
// JOIN. The initiator replaces a lost stream (index i) by a new TCP
// connection running the handshake above with the hello flag JOIN and
// the session's id, shape and index i. The responder admits a JOIN hello
// only for a running session it holds, with the same checks and pre-auth
// limits as any hello (a join for a session it does not hold is refused
// with StatusUnknownSession: the far agent lost the session's state, and
// the initiator aborts). After the confirm, the initiator's first frame
// on the stream is JOIN (control sequence 0 of the Up direction), body:
// MAC(session key, "sos v2 join" || session id || th of this stream's
// handshake). The session key is the one derived by the handshake of the
// session's stream 0 (bytes 96..128 above); neither a hello nor any other
// stream reveals it, so only the two agents of the session can attach a
// stream to it, and a proof is good for one stream only (it names that
// stream's transcript). The stream stays counted as unauthenticated until
// the JOIN is verified within the pre-auth timeout; a bad proof resets it.
// The responder then drops its old stream i if it still has one (its
// frames are retransmitted), and both ends start the new stream's control
// sequences afresh. The initiator retries a failed join with exponential
// backoff (50 ms doubling to 2 s); a joined stream lost within a second
// of its handshake counts as a failed join (a path resetting each stream
// after its JOIN costs one handshake per backoff, not a loop).
//
// # Pooled streams: BIND
//
// A client-side agent may keep streams open and authenticated before any
// session needs them (the warm pool), so a new session starts without a
// TCP or key exchange across the WAN. A pooled stream runs the handshake
// above with the hello flag POOL (2; never together with JOIN) and names
// no session: its session id, stream index, stream count, chunk size,
// queue length and both addresses are zero. The responder admits it only
// for an initiator that is the client-side agent of one of its own
// whitelist entries, under its pre-auth limits and its bound on idle
// pooled streams per peer (else StatusPoolRefused); the confirm
// completes the handshake and the stream idles (TCP keepalive only: no
// frames while idle).
//
// The handshake's keys of a pooled stream (Up, Down) seal only BIND
// frames, so its frame codec is built with chunk size BindBodySize; the
// 32 bytes at 96..128 of its key material are not a session key but the
// stream's secret S_0. Binds of a stream count generations g = 0, 1, ...:
// the format lets a stream be bound again after its session ended, though
// this implementation binds each pooled stream once (g = 0) and closes it
// with its session.
//
// BIND (type 7, Up, a control frame numbered ControlSeq(g) under the
// pooled stream's own keys), body 152 bytes:
//
//	off len field
//	  0   8 generation g (exactly the stream's next)
//	  8  16 nonce (fresh random)
//	 24  16 session id
//	 40   2 stream index (< stream count)
//	 42   2 stream count (>= 1)
//	 44   4 chunk size (1 .. 16 MiB)
//	 48   4 queue length
//	 52  18 original client address and port
//	 70  18 original server address and port
//	 88  32 join proof: zero on stream 0; else MAC(session key,
//	        "sos v2 bind join" || session id || th || g)
//	120  32 MAC(S_g, "sos v2 bind" || th || bytes 0..120)
//
// th is the pooled stream's transcript hash. The MAC is in the body, so a
// BIND is authenticated in mode none too. Keys of the bound session on
// this stream: okm = HKDF-SHA256(secret = S_g, salt = nonce, info =
// "sosappliance v2 bind keys" || th || g || session id, 96 bytes): Up,
// Down, and (used on stream 0 only) the session key. Then both ends
// ratchet S_{g+1} = HKDF-SHA256(secret = S_g, salt = th, info =
// "sosappliance v2 bind ratchet" || g, 32 bytes) and forget S_g, so no key
// serves two sessions (the nonce and g differ, and the secret moved on)
// and a stream's later state reveals nothing of the sessions it carried
// before. A replayed BIND fails: on its own stream S_g is gone (and g is
// spent); on another stream th differs.
//
// The responder checks the BIND as it checks a hello (its whitelist entry
// for client and server names the initiator, the shape is that entry's,
// its session limits), and for a stream other than 0 the join proof under
// the session key of the session named; a refused or unverifiable bind
// resets the stream. That reset is not authenticated, but what follows
// is: the initiator's joins of the session are refused as
// StatusUnknownSession, and an initiator that has received no frame of
// the session (and so holds every frame it sent) then opens stream 0
// again with a fresh hello (not JOIN, same session id), whose reply is
// authenticated. It may send that hello as soon as it has given up stream
// 0, without a JOIN first (sosappliance does); a duplicate answer then
// means the session was founded, and stream 0 joins it. Accepted, it
// founds the session with the key of its own handshake, and the
// initiator sends its frames again from the first;
// refused, the initiator may carry the connection another way
// (sosappliance carries it direct, with every byte it read from the
// client first). Neither may deliver twice what a late BIND of stream 0
// (queued at the responder when the initiator gave up on its stream)
// delivered, its answers lost with the stream. So a responder settles
// each session id: to a fresh hello for stream 0 of a session it holds or
// founded before it answers as for that session (StatusDuplicateStream
// once it started) before any other check but its name and the
// reflection check, and it refuses a BIND of stream 0 whose stream the
// initiator closed or reset since (it gave up on it), whose id it settled
// (a session it founded, or whose fresh stream 0 it refused) or whose
// fresh hello is in its handshake, deciding each under one lock;
// sosappliance remembers settled ids for 5 minutes (at most 16,384
// founded and 16,384 refused). An initiator takes only a refusal given
// after that lookup for "not founded" (not StatusWrongResponder,
// StatusReflected or StatusVersion). StatusDuplicateStream to the fresh
// hello means the session was founded: stream 0 joins it if it still
// runs, and the initiator resets its connection otherwise. The session key of a session whose stream 0 was
// bound is the one its BIND derived (bytes 64..96 above); a session whose
// stream 0 was a fresh stream takes it from that handshake, and pooled
// streams bind into it with their proof just the same. Frames of the
// session follow the BIND at once, under the bound keys; the BIND counts
// as the stream's Up control frame 0 of the session (as a JOIN does), so
// the session's control frames on it start at 2^63 + 1 Up and 2^63 Down.
// The responder starts a session whose stream 0 was bound at once (it
// connects to the server as soon as that BIND arrives) instead of
// gathering all its streams; every stream not bound from the pool joins
// the running session as JOIN describes. Because such a JOIN may overtake
// the BIND of stream 0 (another connection), a responder that does not
// hold the session a JOIN of a stream other than 0 names waits a moment
// (500 ms) for it before refusing it as StatusUnknownSession. A JOIN of
// stream 0 is answered at once: its initiator gave up the stream that
// carried stream 0's BIND before sending it, so there is nothing to wait
// for (a late BIND and the fresh hello that follows are decided as
// above).
//
// # Half-close and abort
//
// End of input from an end host becomes a FIN frame. The receiver writes
// every chunk before the FIN, checks the byte count, then half-closes
// toward its end host and sends its final ACK. A stream's writer
// half-closes once both directions are finished: its own FIN acknowledged
// and the peer's FIN delivered (and the final ACK sent on that stream).
// A complete session lingers, at most the reconnect timeout, until a
// stream brings the peer's FIN (the peer is complete too): meanwhile lost
// streams are still replaced, so a final ACK lost with its stream goes
// again on the replacement; a join refused as an unknown session then only
// means the peer finished.
// So a lost FIN is retransmitted like any frame, and a stream that ends
// cleanly (a TCP FIN) before both directions are finished means the far
// agent's process ended: the session aborts (a network failure resets a
// stream or leaves it silent; those are losses). Once the peer is
// complete, a stream whose FIN has not come within the stall timeout (its
// path went silent and, with nothing outstanding on it, no stall fires) is
// closed; when the linger (the reconnect timeout) runs out first, the
// session ends with the streams still up. Either way the session counts as completed and no
// stream as lost: this side had delivered all it received and had its own
// data acknowledged.
//
// A session aborts (ABORT on the surviving streams, each then half-closed
// and reset a moment later; both agents reset (RST) their end-host
// connections at once, so a truncated transfer never looks complete, and
// never a FIN) only when: it has had no stream for the reconnect timeout
// (the initiator could re-establish none that lived: streams lost within a
// second of their handshake do not restart the timeout); the far agent refused a join
// as StatusUnknownSession (its process died: its session state is lost);
// or anything fails authentication or breaks the rules above.
package stripe
