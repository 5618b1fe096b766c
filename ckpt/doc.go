// Package ckpt holds checkpoints: versioned manifests of content-addressed
// chunks and the on-disk chunk store that keeps them. The same types are what
// package transfer moves between nodes (one definition, here).
//
// # Chunks
//
// A file is cut into chunks by content-defined chunking (FastCDC with a gear
// rolling hash; min 128 KiB, average 512 KiB, max 2 MiB), so an insertion
// that shifts later offsets changes only the chunks around it. A chunk is named
// by the SHA-256 of its bytes ([Hash]).
//
// # Manifests
//
// A [Manifest] names one version of one job's checkpoint: job id, version
// number, creation time and the files, each with its size, mode, SHA-256 and
// ordered chunk list. Bundles and outputs also hold directories and
// symlinks (a symlink's target is in the manifest, and [CheckLinks] makes
// every target resolve inside the tree). Its canonical encoding is a small line-based text format
// (see [Manifest.Encode]); the manifest hash is the SHA-256 of that encoding.
// [ParseManifest] accepts only canonical input (parse then encode gives the
// same bytes), so a hash names exactly one manifest.
//
// # Store
//
// A [Store] keeps, under its root directory:
//
//	chunks/ab/abcd…   chunk bytes, file name = hex SHA-256; mtime = last use (LRU)
//	versions/<job>/<version>.manifest   committed versions
//	pending/<job>/<version>.manifest    versions being received (their chunks are pinned)
//	live/<job>        marker: the job is live (its newest version is pinned)
//	pins/<job>/<version>~<name>   a named pin on a version, with its expiry
//	purged/<job>      marker: the job's last version was purged (when)
//	tmp/              temporary files, removed at Open
//
// Every write goes to tmp/ and is renamed into place. A chunk file is then
// fsynced, with its directory, by a background worker while later chunks
// are still arriving, so a commit after a large transfer only waits for the
// last few; a version is committed (its manifest fsynced and renamed into
// versions/, then the directory fsynced) only after every chunk is present,
// verified and durable. A crash at any point leaves either the whole version
// or none (chunks found at Open are made durable by one syncfs(2) before a
// commit uses them). Reads verify each chunk's hash; a corrupt chunk is
// reported with [ErrCorruptChunk], removed so it can be fetched again, and
// [Store.RestoreNewest] falls back to the previous complete version. State is
// the files themselves, so the store survives a restart.
//
// The cache is capped at Config.MaxBytes: after a commit the least recently
// used chunks are evicted (and every version that needed them is dropped),
// except chunks of the newest committed version of a live job, of versions
// a pin without expiry holds and of pending versions; versions held by
// pins with an expiry ([Store.Pin], [Store.Retain]) go last, earliest
// expiry first, and [Store.Purge] drops them once expired. A write that hits a full disk returns [ErrDiskFull], removes what
// the failed version wrote and commits nothing.
//
// # Bundles and outputs
//
// A bundle ([Store.AddBundle]) is a job's working directory stored as
// version 1 of the pseudo-job [BundleKey] of its content's [BundleID],
// honouring an [IgnoreFile] in gitignore syntax ([Ignore]) and a size cap;
// [Store.LayoutBundle] writes it back as a read-only directory, verified.
// A checkpoint version holds the job's outputs under [OutputDir]
// ([Store.AddCheckpoint], [Store.RestoreCheckpoint]).
package ckpt
