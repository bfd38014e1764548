package store

// This file is the whole on-disk layout of the state database. Every bucket
// and key the store reads or writes is listed here, and nowhere else, so a
// reader can see the schema at a glance and a change to it is one diff.
//
//	meta/
//	  schema_version  8-byte big-endian uint64, SchemaVersion
//	  lineage         36-byte text, a random UUID (version 4) made when the
//	                  database is first initialised and never changed
//	  serial          8-byte big-endian uint64, the state serial
//	items/
//	  <kind>/<key>    JSON Record: an item the appliance owns
//	history/
//	  <serial>        8-byte big-endian serial -> JSON HistoryEntry; the
//	                  newest MaxHistory only
//
// Values are JSON so that `bbolt` tools and later schema versions can read
// them without this package's Go types.
//
// The lineage names one state database for its whole life, as Terraform's
// state lineage does: a saved plan records it, and apply refuses a plan made
// against another database even when the serials happen to agree (two nodes'
// databases, or a database deleted and made anew, both start at serial 0).
//
// Versions:
//
//	1  meta/schema_version, meta/serial, items/, history/
//	2  adds meta/lineage; a version 1 database gets a fresh lineage on its
//	   first open by this binary and is then marked version 2
//
// SchemaVersion is the layout version this binary writes. A database with a
// higher version was written by a newer sosappliance and is refused rather
// than misread.
const SchemaVersion uint64 = 2

var (
	bucketMeta    = []byte("meta")
	bucketItems   = []byte("items")
	bucketHistory = []byte("history")

	keySchemaVersion = []byte("schema_version")
	keyLineage       = []byte("lineage")
	keySerial        = []byte("serial")
)

// allBuckets are created when a database is first opened.
var allBuckets = [][]byte{bucketMeta, bucketItems, bucketHistory}

// itemKey is the items/ key of one owned item. Kinds never contain "/", so
// the first "/" separates kind from key even when the key has slashes
// ("interface/eth1/mtu").
func itemKey(kind, key string) []byte { return []byte(kind + "/" + key) }
