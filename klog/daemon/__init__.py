"""The broker process: network layer, request handlers, partitions, controller."""
