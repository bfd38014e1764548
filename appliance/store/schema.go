package store

// This file is the whole on-disk layout of the state database. Every bucket
// and key the store reads or writes is listed here, and nowhere else, so a
// reader can see the schema at a glance and a change to it is one diff.
//
//	meta/
//	  schema_version  8-byte big-endian uint64, SchemaVersion
//	  serial          8-byte big-endian uint64, the state serial
//	items/
//	  <kind>/<key>    JSON Record: an item the appliance owns
//	history/
//	  <serial>        8-byte big-endian serial -> JSON HistoryEntry
//
// Values are JSON so that `bbolt` tools and later schema versions can read
// them without this package's Go types.

// SchemaVersion is the layout version this binary writes. A database with a
// higher version was written by a newer sosappliance and is refused rather
// than misread.
const SchemaVersion uint64 = 1

var (
	bucketMeta    = []byte("meta")
	bucketItems   = []byte("items")
	bucketHistory = []byte("history")

	keySchemaVersion = []byte("schema_version")
	keySerial        = []byte("serial")
)

// allBuckets are created when a database is first opened.
var allBuckets = [][]byte{bucketMeta, bucketItems, bucketHistory}

// itemKey is the items/ key of one owned item. Kinds never contain "/", so
// the first "/" separates kind from key even when the key has slashes
// ("interface/eth1/mtu").
func itemKey(kind, key string) []byte { return []byte(kind + "/" + key) }
