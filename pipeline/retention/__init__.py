"""Retention over raw data, intermediates and versions: the policy (config section), the
decisions (pure), applying them with an audit log, and bucket lifecycle rules."""
