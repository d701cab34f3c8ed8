#!/bin/sh
# Topic data to Parquet with Spark (pyspark), from a live broker and from a log directory.
#   sh examples/spark/export.sh 127.0.0.1:9092 TOPIC LOG_DIR OUT_DIR
# Live: what the broker holds now, read through the Kafka protocol; exactly once across
# runs through the checkpoint in OUT_DIR/live/_klog_checkpoint (run it again: only new
# records are exported). Offline: the same from a stopped broker's (or Kafka's) log
# directory, no broker needed.
set -eu
bootstrap=$1 topic=$2 log_dir=$3 out=$4
klog spark-export --bootstrap-server "$bootstrap" --topic "$topic" --output "$out/live" \
    --master 'local[1]'
klog spark-export --source "$log_dir" --topic "$topic" --output "$out/offline" \
    --format json --master 'local[1]'
