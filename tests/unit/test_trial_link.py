"""The seal of a trial's network link (sandbox/_netns.py): its iptables rules, in the order the
chains read them, inserted and deleted as one."""

from __future__ import annotations

from levelfield.sandbox import _netns


def test_a_trials_link_refuses_the_host_and_other_links_before_it_lets_anything_out() -> None:
    net = _netns.TrialNetwork("lf-r-t", "lfh0123456789", "169.254.200.1", "169.254.200.2",
                              "169.254.200.0/30", "levelfield:r:t", ("eth0",))  # fmt: skip
    rules = _netns._filter_rules(net)
    assert rules[:2] == [
        ("INPUT", "-i lfh0123456789 -p tcp", "REJECT --reject-with tcp-reset"),
        ("INPUT", "-i lfh0123456789", "REJECT --reject-with icmp-admin-prohibited"),
    ]
    forward = [(m, t) for chain, m, t in rules if chain == "FORWARD"]
    out = forward.index(("-i lfh0123456789 -o eth0", "ACCEPT"))
    assert forward[out - 1][0] == "-i lfh0123456789 -d 169.254.0.0/16"  # link-local: never
    assert forward[out + 2] == ("-i lfh0123456789", "REJECT --reject-with icmp-admin-prohibited")
    assert forward[-1] == ("-o lfh0123456789", "DROP")  # in: only answers, the rule above it
    inserted = _netns._rules(net, "-I").splitlines()
    filters = [line for line in inserted if line.startswith("-I ")]
    assert filters[0].startswith("-I FORWARD -o lfh0123456789 ") and filters[0].endswith("DROP")
    assert all('--comment "levelfield:r:t"' in line for line in filters)  # each goes first
    deleted = _netns._rules(net, "-D")
    assert deleted.count("-D ") == len(filters) + 1  # the same rules, and the NAT one
