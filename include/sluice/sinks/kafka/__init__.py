"""The ``kafka`` sink: records published to a topic, exactly once through Kafka transactions
(docs/kafka-sink.md).

qos 2, two phases:

1. *prepare* writes the epoch's rows as Parquet (one Spark write) under the pipeline's
   checkpoint storage, at ``kafka-staging/<sink>/<epoch:012d>-<attempt>/``: durable, owned by
   that attempt, and invisible to every Kafka reader.
2. *commit* reads the staged files with pyarrow (no Spark) and publishes them with a
   transactional producer whose ``transactional.id`` is stable per pipeline and sink
   (:func:`transactional_id`). ``init_transactions()`` fences any other producer with that id
   (a zombie attempt, a commit racing this one) and aborts what it left open. Then the sink
   reads the **epoch markers** back with ``isolation.level=read_committed``: one record per
   committed transaction on the marker topic (``<topic>.sluice-epochs``, one partition,
   compacted), keyed ``<pipeline>/<sink>/<epoch:012d>``, whose value names the epoch, the chunk
   ``i`` of ``n`` and the transactional id. Each transaction holds its records **and** its
   marker, so the marker is visible exactly when the records are. A chunk already marked (or
   any later epoch: commits run in epoch order, so a late retry of an old epoch finds a later
   marker) is skipped; the others are produced and ``commit_transaction()``-ed one by one.
   Then the staging is deleted.

   An epoch above ``max_records_per_transaction`` records is published as
   ``ceil(rows / limit)`` transactions (chunks), each with its own marker, in a fixed order
   (staged files by name, rows in file order), so a commit killed between chunks resumes at
   the first chunk not marked, without duplicates. A reader may see the first chunks of such
   an epoch before the last one.

   Two commits racing: the second ``init_transactions()`` fences the first, whose produce or
   ``commit_transaction()`` then fails as fenced. The fenced one waits for the markers (the
   winner's commit makes them visible) and succeeds when they show the epoch; if they do not
   within a while (the winner died), it takes the id back and publishes what is missing.

qos 1: *write* publishes straight from the result frame with the idempotent producer
(``enable.idempotence``, ``acks=all``) and flushes; no transaction, no marker: a replayed epoch
is published again (duplicates only). qos 0: *prepare* stages as at qos 2 and *publish*, run
once right after the checkpoint, sends the staged rows without idempotence and with
``retries=0``, ``acks=1``, no transaction and no marker: a record the broker did not take is
lost, never resent.

Rewinds: Kafka cannot take records back. :meth:`KafkaSink.retraction_problem` refuses a
rewind past an epoch the markers show as published, unless ``on_rewind: republish`` (upsert
sinks only): then the replay is published like any epoch and, on a compacted topic, the
last value per key is the replay's.

One job per module, each importing only those listed before it:

* :mod:`~sluice.sinks.kafka.producer`: the producers' settings by qos, and their failures read;
* :mod:`~sluice.sinks.kafka.admin`: the data and marker topics, created when missing;
* :mod:`~sluice.sinks.kafka.markers`: the epoch markers, their key and reading them back;
* :mod:`~sluice.sinks.kafka.encoding`: rows as records, and the stage read back in order;
* :mod:`~sluice.sinks.kafka.publish`: the transactional publish, and the plain produce;
* :mod:`~sluice.sinks.kafka.sink`: :class:`KafkaSink`, staging, commit, direct writes, rewinds.
"""

from sluice.sinks.exceptions import KafkaPublishError, KafkaSinkError
from sluice.sinks.kafka.encoding import CHANGELOG_COLUMNS
from sluice.sinks.kafka.markers import Marker
from sluice.sinks.kafka.producer import transactional_id
from sluice.sinks.kafka.sink import STAGING, KafkaSink, KafkaStaged

__all__ = [
    "CHANGELOG_COLUMNS",
    "STAGING",
    "KafkaPublishError",
    "KafkaSink",
    "KafkaSinkError",
    "KafkaStaged",
    "Marker",
    "transactional_id",
]
