#!/usr/bin/env bash
# hg-train against bad input and interruptions (issue 11): each case is one CTest test
# (tests/train_cli/CMakeLists.txt). A refused input ends with exit code 1 and exactly one line on
# stderr naming the problem, before any training -- never std::terminate (rc 134), a hang or a
# silent no-op.
#
#   hg_train_cli.sh HG_TRAIN FIXTURES_TOOL WORK_DIR CASE
set -uo pipefail
hg_train=$1 tool=$2 work=$3 case=$4
fixtures=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fixtures
data=$work/data
dir=$work/cases/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
# A small, quick run: 4096 training images of the tiny dataset, one thread.
quick=(--data "$data/tiny" --threads 1 --batch-size 64)

fail() {
  echo "FAIL ($case): $*"
  for f in stdout stderr; do [[ -f $f ]] && { echo "--- $f:"; cat "$f"; }; done
  exit 1
}

# run ARGS...: hg-train with a time limit (a hang fails as rc 124); sets $rc.
run() {
  echo "+ hg-train $*" | cut -c 1-200
  timeout 120 "$hg_train" "$@" >stdout 2>stderr
  rc=$?
}

# expect_error PATTERN ARGS...: exit code 1, one stderr line "hg-train: ..." matching PATTERN
# (an extended regex), and no epoch trained.
expect_error() {
  local pattern=$1
  shift
  run "$@"
  [[ $rc -eq 1 ]] || fail "exit code $rc, expected 1"
  [[ $(wc -l <stderr) -eq 1 ]] || fail "stderr holds $(wc -l <stderr) lines, expected one"
  grep -qE "^hg-train: .*$pattern" stderr || fail "stderr does not match: $pattern"
  ! grep -q "^epoch " stdout || fail "it trained before refusing"
}

expect_success() {
  run "$@"
  [[ $rc -eq 0 ]] || fail "exit code $rc, expected 0"
}

# A valid one-epoch checkpoint to edit: checkpoint KIND ARGS... -> ck/checkpoint.safetensors
make_checkpoint() {
  expect_success "${quick[@]}" --epochs 1 --max-steps 4 --out ck "$@"
  [[ -f ck/checkpoint.safetensors ]] || fail "no checkpoint written"
}
edit() { "$tool" edit ck/checkpoint.safetensors "$@" || fail "editing the checkpoint failed"; }

case $case in
  # ---- item 2: exceptions that are not hg::Error used to reach std::terminate ----------------
  data_path_too_long)
    expect_error "cannot access .*File name too long" --data "/$(printf 'x%.0s' {1..5000})" ;;
  data_symlink_loop)
    ln -s loop loop
    expect_error "cannot access .*Too many levels of symbolic links" --data "$dir/loop" ;;
  out_under_a_file)
    touch a_file
    expect_error "--out a_file/run: cannot create the directory" "${quick[@]}" --epochs 1 --out a_file/run ;;
  out_not_writable)  # /proc/self is a directory nobody can create files in (root included)
    expect_error "--out /proc/self: cannot write there" "${quick[@]}" --epochs 1 --out /proc/self ;;
  checkpoint_malformed_optimizer_key)
    make_checkpoint --optimizer sgd
    edit bad.safetensors rename:optimizer.state.0.step=optimizer.state.x.step
    expect_error "malformed key \"state.x.step\"" "${quick[@]}" --resume bad.safetensors ;;
  checkpoint_huge_parameter_index)
    make_checkpoint --optimizer sgd
    edit bad.safetensors rename:optimizer.state.0.step=optimizer.state.99999999999999999999999.step
    expect_error "malformed key" "${quick[@]}" --resume bad.safetensors ;;
  checkpoint_without_rng_seed)
    make_checkpoint
    edit bad.safetensors drop:rng.seed
    expect_error "mismatched: rng \(rng: missing key\(s\) \"seed\"\)" "${quick[@]}" --resume bad.safetensors ;;
  # ---- item 3: checkpoint values obey the constructors' rules ----------------------------------
  checkpoint_scale_zero)
    make_checkpoint --precision f16
    edit bad.safetensors f64:scaler.scale=0
    expect_error "the scale must be in \[min_scale, max_scale\]" "${quick[@]}" --precision f16 --resume bad.safetensors ;;
  checkpoint_nan_learning_rate)
    make_checkpoint
    edit bad.safetensors f64:optimizer.param_groups.0.lr=nan
    expect_error "learning rate must be finite and >= 0, got nan" "${quick[@]}" --resume bad.safetensors ;;
  checkpoint_of_another_optimizer)
    make_checkpoint --optimizer sgd
    expect_error "saved by \"SGD\", not Adam" "${quick[@]}" --optimizer adam --resume ck/checkpoint.safetensors ;;
  checkpoint_of_another_model)  # refused from the metadata, before anything is loaded
    make_checkpoint --model mlp
    expect_error "was written with model \"mlp\", not cnn" "${quick[@]}" --model cnn --resume ck/checkpoint.safetensors ;;
  checkpoint_of_a_disabled_scaler)  # a bf16 run's checkpoint has no GradScaler state for an f16 run
    make_checkpoint --precision bf16
    expect_error "mismatched: scaler \\(GradScaler.load_state_dict: the state dict is empty" "${quick[@]}" --precision f16 \
      --resume ck/checkpoint.safetensors ;;
  checkpoint_huge_counter)
    make_checkpoint --precision f16
    edit bad.safetensors i64:scaler._growth_tracker=9223372036854775807
    expect_error "\"_growth_tracker\" is 9223372036854775807, outside" "${quick[@]}" --precision f16 --resume bad.safetensors ;;
  # ---- item 4: a batch size near INT64_MAX was a silent run of zero steps ----------------------
  huge_batch_size)
    expect_success --data "$data/tiny" --threads 1 --epochs 1 --batch-size 9223372036854775807
    grep -qE "^epoch 1/1  loss [0-9]*[1-9]" stdout || fail "no step was trained (loss 0)" ;;
  # ---- item 8 ------------------------------------------------------------------------------
  resume_from_a_fifo)  # used to block forever
    mkfifo checkpoint.fifo
    expect_error "not a regular file \(a FIFO\)" "${quick[@]}" --resume checkpoint.fifo ;;
  resume_from_a_missing_file)
    expect_error "cannot open: No such file or directory" "${quick[@]}" --resume missing.safetensors ;;
  compare_refuses_out_and_resume)
    expect_error "--compare .* cannot be combined with --out" "${quick[@]}" --compare --out run
    expect_error "--compare .* cannot be combined" "${quick[@]}" --compare --resume x.safetensors ;;
  compare_csv_needs_compare)
    expect_error "--compare-csv needs --compare" "${quick[@]}" --compare-csv c.csv ;;
  step_log_not_writable)  # refused before any training
    expect_error "--log-steps /nonexistent-dir/steps.csv: cannot open: No such file" "${quick[@]}" \
      --log-steps /nonexistent-dir/steps.csv ;;
  # ---- issue 25, item 6: every output path is checked before training, every write checked ------
  gradient_histogram_not_writable)
    expect_error "--gradient-histogram /nonexistent-dir/h.csv: cannot open: No such file" "${quick[@]}" \
      --gradient-histogram /nonexistent-dir/h.csv ;;
  compare_outputs_not_writable)  # used to fail only after all three trainings
    expect_error "--compare-csv /nonexistent-dir/c.csv: cannot open" "${quick[@]}" --compare --compare-csv /nonexistent-dir/c.csv
    expect_error "--gradient-histogram /nonexistent-dir/h_f32.csv: cannot open" "${quick[@]}" --compare \
      --gradient-histogram /nonexistent-dir/h.csv ;;
  outputs_to_a_full_disk)  # /dev/full: every write fails with ENOSPC; used to exit 0 with nothing written
    for option in --log-steps --gradient-histogram; do
      expect_error "$option /dev/full: write failed: No space left on device" "${quick[@]}" --max-steps 2 "$option" /dev/full
    done
    expect_error "--compare-csv /dev/full: write failed" "${quick[@]}" --compare --compare-csv /dev/full ;;
  compare_csv_memory_parts)  # issue 30: the run's memory by part, for docs/amp.md's figure 5
    expect_success "${quick[@]}" --epochs 1 --max-steps 3 --compare --compare-csv c.csv
    # The first columns keep their places (scripts/figures.sh reads them by position).
    head -1 c.csv | grep -qx "precision,isa,threads,batch_size,samples_per_s,peak_bytes,step_peak_bytes,activation_bytes,\
final_loss,test_accuracy,skipped,final_scale,dataset_bytes,weight_bytes,gradient_bytes,optimizer_state_bytes,\
batch_bytes,live_before_step_bytes" || fail "unexpected columns: $(head -1 c.csv)"
    [[ $(grep -c "^f32,\|^f16,\|^bf16," c.csv) -eq 3 ]] || fail "expected one row per precision"
    # Each part is measured from its tensors' storages; checked here against what they must be
    # (the tiny set: 4096 + 64 u8 images of 784 pixels and i64 labels; the MLP's 235 146 f32
    # parameters, no buffers; SGD's momentum: one f32 buffer per parameter; a batch of 64 f32
    # images and i64 labels), and together against the allocator's count of live bytes before
    # the step: the rest (the GradScaler's few scalars) is under 4 KiB.
    awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) c[$i] = i; next }
      function v(name) { return $c[name] + 0 }
      function check(ok, what) { if (!ok) { print "FAIL (" $1 "): " what; bad = 1 } }
      { check(v("dataset_bytes") == (4096 + 64) * (784 + 8), "dataset_bytes " v("dataset_bytes"))
        check(v("weight_bytes") == 235146 * 4, "weight_bytes " v("weight_bytes"))
        check(v("gradient_bytes") == v("weight_bytes"), "gradient_bytes " v("gradient_bytes") " != weight_bytes")
        check(v("optimizer_state_bytes") == v("weight_bytes"), "optimizer_state_bytes " v("optimizer_state_bytes"))
        check(v("batch_bytes") == 64 * (784 * 4 + 8), "batch_bytes " v("batch_bytes"))
        rest = v("live_before_step_bytes") - v("dataset_bytes") - v("weight_bytes") - v("optimizer_state_bytes") - v("batch_bytes")
        check(rest >= 0 && rest < 4096, "live before the step minus the parts: " rest " bytes")
        # The figure stacks the step on the live part: saved for backward, gradients, the rest.
        check(v("peak_bytes") >= v("live_before_step_bytes") + v("activation_bytes") + v("gradient_bytes"),
              "the peak is below live + saved + gradients") }
      END { exit bad }' c.csv || fail "the memory parts disagree (c.csv: $(cat c.csv))" ;;
  checkpoint_every_needs_out)
    expect_error "--checkpoint-every needs --out" "${quick[@]}" --checkpoint-every 5 ;;
  empty_test_set)
    expect_error "the test set in .* is empty" --data "$data/empty_test" --threads 1 ;;
  empty_training_set)
    expect_error "the training set in .* is empty" --data "$data/empty_train" --threads 1 ;;
  images_not_28x28)
    expect_error "holds images of 32x32 pixels, expected 28x28" --data "$data/images_32x32" --threads 1 ;;
  negative_options)
    for option in --threads --train-limit --max-steps --checkpoint-every --lr --momentum --seed; do
      expect_error "$option: must be a number >= 0, got -3" "${quick[@]}" "$option" -3
    done
    expect_error "--epochs: must be a number > 0, got -1" "${quick[@]}" --epochs -1 ;;
  resume_counts_epochs_in_all)
    make_checkpoint
    expect_success "${quick[@]}" --max-steps 4 --epochs 2 --resume ck/checkpoint.safetensors
    grep -q "^epoch 2/2 " stdout || fail "expected the line of epoch 2/2"
    ! grep -q "^epoch 1/" stdout || fail "epoch 1 ran again"
    expect_success "${quick[@]}" --epochs 1 --resume ck/checkpoint.safetensors
    grep -q "nothing to train" stdout || fail "expected 'nothing to train'" ;;
  interrupted_run_resumes_bitwise)
    # Killed (SIGKILL) once its first checkpoint exists -- per step here, per epoch for the
    # second run -- then resumed with the same command: the final model must equal an
    # uninterrupted run's, bit for bit. A temporary of a killed write is removed on resume.
    train=(--data "$data/tiny" --threads 1 --batch-size 16 --optimizer adam --lr 0.001 --epochs 3)
    expect_success "${train[@]}" --out reference
    for every in 3 0; do
      out=run_every_$every
      "$hg_train" "${train[@]}" --out $out --checkpoint-every $every >victim.log 2>&1 &
      victim=$!
      for _ in $(seq 1 2000); do [[ -f $out/checkpoint.safetensors ]] && break; sleep 0.005; done
      kill -9 $victim 2>/dev/null
      wait $victim 2>/dev/null
      grep -q "^wrote" victim.log && echo "(the run finished before it could be killed)" || echo "(killed mid-run)"
      [[ -f $out/checkpoint.safetensors ]] || fail "no checkpoint before the kill"
      touch $out/checkpoint.safetensors.tmp.2000000000.0  # as a write killed in the middle leaves
      expect_success "${train[@]}" --out $out --checkpoint-every $every --resume $out/checkpoint.safetensors
      grep -qE "removed [0-9]+ temporary file" stdout || fail "the stale temporary was not reported"
      ! ls $out/*.tmp.* >/dev/null 2>&1 || fail "temporaries left in $out"
      cmp $out/model.safetensors reference/model.safetensors || fail "the resumed model differs (every $every)"
    done ;;
  # ---- issue 25: nothing silent ----------------------------------------------------------------
  checkpoint_scale_outside_the_bounds)  # item 1: 1e-40 passed as "finite" and every weight became NaN
    make_checkpoint --precision f16
    for scale in 1e-40 1e-300 3.4e38; do
      edit bad.safetensors f64:scaler.scale=$scale
      expect_error "mismatched: scaler \(GradScaler.load_state_dict: the scale must be in \[min_scale, max_scale\] = \[1, 16777216\]" \
        "${quick[@]}" --precision f16 --epochs 2 --resume bad.safetensors
    done ;;
  checkpoint_keys_lost_or_unused)  # item 2: a flipped bit in a key used to drop that state silently
    make_checkpoint --optimizer sgd
    edit bad.safetensors "rename:optimizer.state.0.momentum_buffer=op|imizer.state.0.momentum_buffer"
    expect_error "keys under no part the file lists: \"op\|imizer.state.0.momentum_buffer\".*lacks state.0.momentum_buffer" \
      "${quick[@]}" --epochs 2 --resume bad.safetensors
    edit bad.safetensors "rename:optimizer.steps_applied=optimizer.steps_applieD"
    expect_error "optimizer \(SGD.load_state_dict: missing key \"steps_applied\"" "${quick[@]}" --epochs 2 --resume bad.safetensors
    edit bad.safetensors drop:trainer.step
    expect_error "trainer \(trainer: missing key\(s\) \"step\"" "${quick[@]}" --epochs 2 --resume bad.safetensors
    edit bad.safetensors "rename:loader.sample=loader.samplf"
    expect_error "DataLoader.load_state_dict: missing key\(s\) \"sample\"; unexpected key\(s\) \"samplf\"" "${quick[@]}" \
      --epochs 2 --resume bad.safetensors ;;
  checkpoint_of_the_first_hg_train)  # item 5: written by hg-train at 2c8fe25 (format 0, no "kind")
    cp "$fixtures/hg_train_2c8fe25_cnn_f16_sgd.safetensors" old.safetensors
    old=(--data "$data/tiny" --threads 1 --batch-size 64 --train-limit 256 --model cnn --precision f16 --optimizer sgd)
    expect_success "${old[@]}" --epochs 2 --resume old.safetensors
    grep -q "^resuming from old.safetensors: 1 epoch(s) done" stdout || fail "it did not resume"
    grep -q "^epoch 2/2 " stdout || fail "expected the line of epoch 2/2"
    # Its state names must fit the optimizer it resumes into (no kind to compare).
    expect_error "unexpected state \"state.0.momentum_buffer\" for this Adam optimizer" \
      "${old[@]/sgd/adam}" --epochs 2 --resume old.safetensors ;;
  resume_with_another_batch_size)  # item 7: the loader continues at the sample where it stopped
    # 10 steps of 128 = samples 0..1279 of 4096 taken; at 64 per step, 44 steps are left.
    expect_success --data "$data/tiny" --threads 1 --batch-size 128 --epochs 1 --max-steps 10 --out ck
    expect_success "${quick[@]}" --epochs 2 --resume ck/checkpoint.safetensors --log-steps steps.csv
    grep -q "1 epoch(s) done, 1280 sample(s) into the next" stdout || fail "expected the resume position"
    [[ $(grep -c '^[0-9]' steps.csv) -eq 44 ]] || fail "expected 44 steps of 64, got $(grep -c '^[0-9]' steps.csv)"
    [[ $(sed -n 2p steps.csv | cut -d, -f1) -eq 11 ]] || fail "the step count does not continue at 11" ;;
  ranks_must_agree)  # item 4 (with MPI): each setting the ranks share, one rank differing
    [[ -n ${HG_MPIEXEC:-} ]] || { echo "skipped: built without MPI"; exit 0; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    base=(--threads 1 --epochs 1 --max-steps 2)
    cp -r "$data/tiny" other_data  # the same size, one label changed
    printf '\x03' | dd of=other_data/train-labels-idx1-ubyte bs=1 seek=20 conv=notrunc status=none
    make_checkpoint
    while IFS='|' read -r rank0 rank1 name; do
      [[ $rank0 == *--data* ]] || rank0="--data $data/tiny $rank0"
      [[ $rank1 == *--data* ]] || rank1="--data $data/tiny $rank1"
      echo "+ mpirun: rank 0 [$rank0], rank 1 [$rank1]"
      # shellcheck disable=SC2086 # the options are separate words on purpose
      timeout 120 "$HG_MPIEXEC" -np 1 "$hg_train" "${base[@]}" $rank0 : -np 1 "$hg_train" "${base[@]}" $rank1 \
        </dev/null >stdout 2>stderr  # (mpirun would read the case list from stdin)
      rc=$?
      [[ $rc -ne 0 && $rc -ne 124 ]] || fail "exit code $rc for [$rank0] vs [$rank1]"
      grep -q "^hg-train (rank [01] of 2): the ranks disagree on $name" stderr || fail "no error naming $name"
      ! grep -q "^epoch " stdout || fail "it trained"
    done <<'CASES'
--seed 1|--seed 2|--seed: rank 1 has "2", rank 0 has "1"
--lr 0.05|--lr 0.1|--lr
--optimizer sgd|--optimizer adam|--optimizer
--momentum 0.9|--momentum 0.8|--momentum
--precision bf16|--precision f32|--precision
--batch-size 64|--batch-size 32|--batch-size
--model mlp|--model cnn|--model
--train-limit 1000|--train-limit 999|the training data
--data other_data|--data ../../data/tiny|the training data
--resume ck/checkpoint.safetensors||--resume
CASES
    ;;
  # ---- the CPU level (issue 10) ---------------------------------------------------------------
  cpu_level_cap_unknown)
    HG_CPU_ISA=pentium4 expect_error "HG_CPU_ISA: unknown CPU level 'pentium4'; expected one of generic" "${quick[@]}" --max-steps 1 ;;
  precision_auto_agrees_with_its_reason)
    # The reason line and the run agree: "training in X" and "precision X" in the header.
    expect_success "${quick[@]}" --max-steps 2 --epochs 1 --precision auto
    chosen=$(sed -n 's/^hg-train: --precision auto: .*training in \(f32\|bf16\).*/\1/p' stdout)
    [[ -n $chosen ]] || fail "no '--precision auto: ... training in f32|bf16' line"
    grep -q "^hg-train: .*precision $chosen," stdout || fail "the run's precision is not the $chosen it announced" ;;
  precision_auto_without_native_bf16_trains_f32)
    HG_CPU_ISA=generic expect_success "${quick[@]}" --max-steps 2 --epochs 1 --precision auto
    grep -q "has no native bf16 arithmetic: a bf16 GEMM runs at [0-9.]*x the f32 rate here .*training in f32" stdout ||
      fail "expected the no-native-bf16 reason"
    grep -q "^hg-train: .*precision f32,.*CPU level generic" stdout || fail "expected precision f32 at CPU level generic" ;;
  precision_amp_is_bf16_on_the_cpu)
    expect_success "${quick[@]}" --max-steps 2 --epochs 1 --precision amp
    grep -q "^hg-train: --precision amp: bf16 autocast on the CPU .*runs at [0-9.]*x the f32 rate here" stdout ||
      fail "expected the amp line"
    grep -q "^hg-train: .*precision bf16," stdout || fail "expected precision bf16" ;;
  # ---- --model gpt|lstm: a character-level GPT or LSTM on a text file (issue 29) --------------
  gpt_trains_and_samples|lstm_trains_and_samples)
    head -c 12000 /usr/share/common-licenses/GPL-3 > text.txt
    expect_success --model "${case%%_*}" --data text.txt --steps 30 --threads 1 --batch-size 8
    grep -q "^step 30/30: training loss [0-9.]*, validation loss [0-9.]*, [0-9]* tokens/s" stdout || fail "no final step line"
    grep -q "^  sample (temperature 0.8, top 20 bytes):" stdout || fail "no sample printed"
    before=$(sed -n 's/^before training: validation loss \([0-9.]*\).*/\1/p' stdout)
    after=$(sed -n 's/^step 30\/30: .*validation loss \([0-9.]*\),.*/\1/p' stdout)
    awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b - 1) }' || fail "validation loss $before -> $after: did not learn" ;;
  gpt_checkpoint_activations_change_nothing_but_memory)
    head -c 8000 /usr/share/common-licenses/GPL-3 > text.txt
    expect_success --model gpt --data text.txt --steps 6 --threads 1 --batch-size 4
    mv stdout plain
    expect_success --model gpt --data text.txt --steps 6 --threads 1 --batch-size 4 --checkpoint-activations
    grep -q "activation checkpointing" stdout || fail "the header does not say checkpointing"
    # Bitwise-equal gradients: the same losses and the same sample.
    diff <(grep -v "^hg-train\|tokens/s" plain) <(grep -v "^hg-train\|tokens/s" stdout) || fail "checkpointing changed the run"
    diff <(sed -n 's/.*training loss \([0-9.]*\), validation loss \([0-9.]*\).*/\1 \2/p' plain) \
         <(sed -n 's/.*training loss \([0-9.]*\), validation loss \([0-9.]*\).*/\1 \2/p' stdout) || fail "losses differ" ;;
  gpt_refuses_image_options)
    expect_error "trains for --steps on a text file: .*--epochs" --model gpt --epochs 2
    expect_error "trains with AdamW" --model lstm --optimizer sgd
    expect_error "--checkpoint-activations is for --model gpt" --model lstm --checkpoint-activations
    expect_error "--steps and --checkpoint-activations are for text models" "${quick[@]}" --steps 5 ;;
  gpt_text_too_short)
    head -c 900 /usr/share/common-licenses/GPL-3 > short.txt
    expect_error "900 bytes give [0-9]+ training blocks of 64 tokens, fewer than one batch of 32" --model gpt --data short.txt
    expect_error "No such file|cannot open|cannot access" --model gpt --data missing.txt ;;
  # ---- issue 31: pure bf16 (bf16 weights and optimizer state, no f32 masters) ----------------
  bf16_pure_trains_and_resumes_bitwise)
    # 8 bytes per parameter with Adam (bf16 weight, gradient, m, v), 10 with Kahan's compensation;
    # a run resumed from its first epoch's checkpoint ends with the uninterrupted run's model, bit
    # for bit: the stochastic rounding's stream is in the checkpoint.
    for rounding in stochastic kahan; do
      train=("${quick[@]}" --precision bf16-pure --rounding $rounding --optimizer adam --lr 0.001 --max-steps 6)
      expect_success "${train[@]}" --epochs 2 --out reference_$rounding
      bytes=$([[ $rounding == stochastic ]] && echo 8.00 || echo 10.00)
      grep -q "precision bf16-pure ($rounding rounding)" stdout || fail "the header does not name the rounding"
      grep -q "^memory: $bytes bytes/parameter" stdout || fail "expected $bytes bytes/parameter ($rounding)"
      expect_success "${train[@]}" --epochs 1 --out resumed_$rounding
      expect_success "${train[@]}" --epochs 2 --out resumed_$rounding --resume resumed_$rounding/checkpoint.safetensors
      cmp resumed_$rounding/model.safetensors reference_$rounding/model.safetensors || fail "the resumed model differs ($rounding)"
    done
    expect_success "${quick[@]}" --precision bf16-pure --optimizer sgd --epochs 1 --max-steps 2
    grep -q "^memory: 6.00 bytes/parameter" stdout || fail "SGD with momentum: expected 6 bytes/parameter"
    expect_success "${quick[@]}" --precision bf16 --optimizer adam --epochs 1 --max-steps 2
    grep -q "^memory: 16.00 bytes/parameter" stdout || fail "bf16 autocast (f32 weights): expected 16 bytes/parameter" ;;
  bf16_pure_refuses_misuse)
    expect_error "--rounding is for --precision bf16-pure" "${quick[@]}" --rounding kahan
    expect_error "--precision bf16-pure is for the image models" --model gpt --precision bf16-pure
    # A checkpoint of an f32-master run does not resume as pure bf16, nor the other way round.
    make_checkpoint --precision bf16 --optimizer adam
    expect_error "rounding\.seed|bf16" "${quick[@]}" --precision bf16-pure --optimizer adam --epochs 2 --resume ck/checkpoint.safetensors
    rm -rf ck
    make_checkpoint --precision bf16-pure --optimizer adam
    expect_error "rounding|bf16" "${quick[@]}" --precision bf16 --optimizer adam --epochs 2 --resume ck/checkpoint.safetensors ;;
  # ---- issue 31: FP8 (linear/conv2d quantised, emulated on the CPU) ----------------------------
  fp8_trains_and_resumes_bitwise)
    # Delayed scaling keeps amax histories: a run resumed from its first epoch's checkpoint must
    # scale as the uninterrupted run did, so its model is the same bit for bit.
    train=("${quick[@]}" --precision fp8 --optimizer adam --lr 0.001 --max-steps 6)
    expect_success "${train[@]}" --epochs 2 --out reference
    grep -q "precision fp8," stdout || fail "the header does not name fp8"
    expect_success "${train[@]}" --epochs 1 --out resumed
    expect_success "${train[@]}" --epochs 2 --out resumed --resume resumed/checkpoint.safetensors
    cmp resumed/model.safetensors reference/model.safetensors || fail "the resumed fp8 model differs"
    expect_success "${quick[@]}" --precision fp8-block --epochs 1 --max-steps 3
    expect_success "${quick[@]}" --model cnn --precision fp8 --epochs 1 --max-steps 2
    # An fp8 checkpoint holds the fp8 part; a bf16 run does not resume from it.
    expect_error "fp8" "${quick[@]}" --precision bf16 --optimizer adam --epochs 2 --resume resumed/checkpoint.safetensors
    expect_error "--precision fp8 is for the image models" --model gpt --precision fp8 ;;
  *)
    fail "unknown case" ;;
esac
echo "ok: $case"
