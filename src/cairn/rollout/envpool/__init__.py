"""Env pools: the env instances a rollout steps, in this process or on workers.

- ``local``: ``EnvPool``, env instances in this process reused across iterations (an env
  may hold a process, e.g. a JVM), and ``TimedEnv``, an env on a thread of its own so that
  a call can be abandoned after ``rollout.env_timeout_s``.
- ``workers``: ``WorkerPool`` (``rollout.workers: N``), the envs on N workers reached
  through ``RemoteEnv`` proxies; ``make_env_pool`` picks one of the two pools. The workers
  run on ``ray_backend`` (Ray actors) or ``process_backend`` (local processes).
- ``calls``: ``step_all`` / ``reset_all`` (remote envs step concurrently) and the guarded
  calls, which answer an env fault instead of raising it; ``GuardedEnv`` raises it named.
- ``faults``: the fault kinds, the pool that owns a faulted env, ``FaultStats``.
- ``proxy``: the env protocol forwarded to one call, and the handles calls answer with.

Faults cost one episode, not the run: the pool that owns a faulted env counts the fault
and rebuilds the env, and stops the run in one line when too many episodes are lost.
"""

__all__: list[str] = []
