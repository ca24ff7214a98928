"""A levelfield sandbox inside another harness's trial loop (Harbor's, Inspect's).

The other harness decides the phases and calls exec and file copies; levelfield keeps what its
own runner does around them: the backend started under the policy's limits, the telemetry
sampler and watch beside it, the kernel counters read around each exec (a ceiling the kernel
enforced becomes a `CeilingHit` naming its counter), the evidence read before the sandbox
closes, secrets masked, and a record written where that harness keeps its results.

    sandbox.py    HostedSandbox: that lifecycle, one exec at a time (thread-safe)
    commands.py   what one exec runs: its shell wrapper, and which counter names which kill
    record.py     the record written beside the other harness's result
    leftovers.py  what a killed harness process left, reaped by the next one

No module here imports Harbor or Inspect: `harbor/environment.py` and `inspect/sandbox.py` adapt
`HostedSandbox` to their harness's API, each behind its own optional extra.
"""
