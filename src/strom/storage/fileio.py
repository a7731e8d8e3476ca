"""The storage layer's system calls on its files, in one place.

Every write, fsync, truncation, creation, rename and data read that storage makes on a log
directory's files goes through the names of this module, always looked up at the call
(``fileio.pwrite(fd, data, pos)``; never ``from strom.storage.fileio import pwrite``). In a
broker they *are* the ``os`` functions: a call costs the same one attribute lookup as
``os.pwrite`` and nothing else, so the seam is free when no test uses it.

Why it exists: a failing, full or stalling disk cannot be made on demand on every machine
(device-mapper's ``error``/``flakey``/``delay`` targets need a kernel module and privileges a
test machine may lack), so fault tests replace these names inside a broker process
(:mod:`strom.testing.diskfault`) to make chosen calls on chosen files fail with EIO or ENOSPC
or take seconds. That is also why no caller may keep a reference to one of them.

What is *not* routed here: the reads of a Fetch served with ``sendfile`` from a duplicated
descriptor (:mod:`strom.broker.zero_copy`), the small files read whole at open
(``Path.read_bytes``), directory listings and renames of whole partition directories
(creation, deletion, moves between log directories), the directory lock, and the copy of a
replica moved between log directories (:mod:`strom.storage.log_move`).
"""

from __future__ import annotations

import os

open_fd = os.open
close = os.close
pwrite = os.pwrite
pwritev = os.pwritev
write = os.write
pread = os.pread
fsync = os.fsync
ftruncate = os.ftruncate
truncate = os.truncate
replace = os.replace
rename = os.rename

#: the names a fault injector may replace (and must restore)
NAMES = ("open_fd", "close", "pwrite", "pwritev", "write", "pread", "fsync", "ftruncate",
         "truncate", "replace", "rename")  # fmt: skip
