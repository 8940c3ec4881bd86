"""Versions of one index behind one name: the catalog (``catalog``), building,
switching, rolling back and dropping them (``rollout``), adopting an index from
before versions (``adopt``), and copying one to another store (``migrate``)."""
