# The unit tests built into aiscale_tests when AISCALE_UNIT_TEST_SET=sanitize (the `asan`
# preset): paths under tests/, as regular expressions.
#
# Under ASan + UBSan a test is worth its (3-10x slower) build and run when it feeds the code
# bytes or numbers it did not make itself, or does index arithmetic on sizes it was given:
# that is where out-of-bounds reads, overflows and use-after-free hide. So:
#  - the fuzz replay (every fuzz target over its corpus and the inputs of fixed bugs) and
#    the fuzz regressions;
#  - every file reader: token shards, tokenizers (GPT-2 BPE, tokenizer.json,
#    SentencePiece), corpora (JSONL, gzip), image stores and codecs (LMDB, JPEG, PNG, IDX),
#    safetensors, Hugging Face folders and checkpoints, run records, tfevents, the systems catalogue;
#  - every text parser: the training config, the study and search-space TOML, the command
#    line (integer options, bad input), environment tables, the communication and
#    rendezvous settings;
#  - the code that slices buffers by rank: shards, ring segments, staging rings,
#    sub-communicators, ZeRO and tensor layouts.
# Left out: the numerical checks of models, training, the planner's models, reports drawn
# in Chromium, XGBoost and benchmarks. They run program-made, valid inputs through the same
# kernels whose bounds test_ops (ops.test, ops.grad, ops.coverage: every op on odd shapes)
# checks under the sanitizers, and they are the slow ones (seconds each in a release build).
# The release build runs every unit test; -DAISCALE_UNIT_TEST_SET=all builds them all here too.
set(AISCALE_SANITIZE_TEST_PATTERNS
  "^fuzz/"
  "^core/"
  "^data/"
  "^cli/(bad_input|integer_options)_test"
  "^train/(config|checkpoint|tfevents_reader|hf_import)_test"
  "^plan/(catalog|validation)_test"
  "^sweep/(analysis|step_records)_test"
  "^report/report_inputs_test"
  "^tune/(tune_data|tune_space)_test"
  "^parallel/(comm_options|communication_config|launch_env|rendezvous|store|ring_segments|split|staging_ring|param_server_sharding)_test"
  "^optim/zero_shards_test"
  "^nn/(gpt_shard|gpt_layout|gpt_zero3_layout|gpt_zero3_tensor_layout)_test")
