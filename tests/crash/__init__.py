"""The crash matrix: every stateful feature of the broker, crashed in the middle of its use.

Each *scenario* (tests/crash/scenarios.py) builds one feature's state through real clients
(confluent-kafka; klog's CLI where it is the natural tool: ACLs, client quotas,
reassignments), records what clients observe, and after the disruption checks that clients
observe the same: nothing acknowledged lost or duplicated, nothing committed hidden, nothing
aborted shown, no credential, ACL or config lost, and clients that were connected through
the disruption recover by themselves.

Each *disruption* (tests/crash/site.py) hits one broker while the scenarios' clients run:

- ``sigterm``: a clean shutdown (exit code 0), then a start on the same data;
- ``kill9``: SIGKILL, then a start on the same data (a cluster broker starts again once
  ZooKeeper has dropped its old session, as it would be restarted by a supervisor);
- ``sigstop``: SIGSTOP for ``PAUSE_S`` seconds -- longer than the clients' session and
  request timeouts, and in a cluster than the broker's ZooKeeper session -- then SIGCONT.

Standalone (tests/crash/test_standalone.py) the disruption hits the one broker; in a
3-broker ZooKeeper cluster (tests/crash/test_cluster.py) it hits the broker that leads
every scenario partition and coordinates every scenario group and transactional id, once as
a broker that is not the controller (``leader``) and once as the controller
(``controller``). One broker (or cluster) per disruption -- a *world* -- serves every
scenario at once: they use their own topics, groups, users and ids and do not interfere.
A module's worlds are started, built and disrupted a few side by side
(``site.PARALLEL_WORLDS``: most of a world's time is waiting), then checked. Each cell of
the matrix (disruption x scenario) is one test, so a failure names both.

Compaction's swap gets its own test (tests/crash/test_compaction_steps.py): a crash at every
step of a clean and swap, one topic per step, all read by one broker start.

The README's "After a crash" section lists the cases; tests/test_readme.py keeps it true to
``SCENARIOS`` and the disruptions here.
"""
