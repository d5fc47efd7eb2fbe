"""Running the generated suite and what measures on the real builder: the pytest run and its plugin
(evidence), snapshots, filling expects, the latency bench."""
