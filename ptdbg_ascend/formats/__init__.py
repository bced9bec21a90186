"""Names and on-disk formats, torch-free: the only code that knows how a call, a record or a row is named
and where each file of a dump lies (naming, layout, pkl, dump_json, finding),
and the record model the readers make of a dump (records)."""
