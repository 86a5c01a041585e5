"""The result codes of the SST entry walk and merge, shared by the numba kernels (:mod:`.kernels`) and
their NumPy forms (:mod:`._vectorised`) without importing numba.

Error codes (``scan_blocks``, ``fill_entries``): what is wrong with a data block, at the entry the walk
stopped at. Relations (``fill_entries``' ``rel``): how an entry compares with the previous entry of its file.
"""

from __future__ import annotations

OK = 0
SHORT_BLOCK = 1  # a block shorter than its 4-byte trailer, or not followed by 8 bytes of the buffer
RESTARTS = 2  # a restart count that does not fit the block
HASH_INDEX = 3  # a data block hash index (not read here)
VARINT = 4  # a varint32 running past the entries or over 5 bytes
ENTRY_OVER = 5  # an entry's key or value running past the entries
SHARED = 6  # a key sharing more bytes than the previous key has (or the first key sharing any)
SHORT_KEY = 7  # an internal key shorter than its 8-byte trailer
TOO_MANY = 8  # more entries than the first walk counted (cannot happen on an unchanged buffer)
ARGS = 9  # arrays of the wrong sizes passed in (a caller's mistake, not the file's)

FIRST = 0  # the first entry of its file
GREATER = 1  # a greater user key
OLDER = 2  # the same user key, a lower sequence number
SAME_SEQ = 3  # the same user key and sequence number
DISORDER = 4  # a smaller user key, or the same one with a higher sequence number
