"""Talking to member clusters: access, snapshots, failure classification."""
