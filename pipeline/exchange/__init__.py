"""The two-pass all-to-all exchange that dedup and pack share: W writers' rows to N parts
(partitions, or shards) with requests linear in the data. `plan` cuts it, `sections` is the
object format and its codec, `regroup` is pass 1."""
