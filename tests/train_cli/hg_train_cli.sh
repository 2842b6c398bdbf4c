#!/usr/bin/env bash
# hg-train against bad input and interruptions (issue 11): each case is one CTest test
# (tests/train_cli/CMakeLists.txt). A refused input ends with exit code 1 and exactly one line on
# stderr naming the problem, before any training -- never std::terminate (rc 134), a hang or a
# silent no-op.
#
#   hg_train_cli.sh HG_TRAIN FIXTURES_TOOL WORK_DIR CASE
set -uo pipefail
hg_train=$1 tool=$2 work=$3 case=$4
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
    expect_error "mismatched: rng \(rng: missing key \"seed\"\)" "${quick[@]}" --resume bad.safetensors ;;
  # ---- item 3: checkpoint values obey the constructors' rules ----------------------------------
  checkpoint_scale_zero)
    make_checkpoint --precision f16
    edit bad.safetensors f64:scaler.scale=0
    expect_error "the scale must be positive and finite" "${quick[@]}" --precision f16 --resume bad.safetensors ;;
  checkpoint_nan_learning_rate)
    make_checkpoint
    edit bad.safetensors f64:optimizer.param_groups.0.lr=nan
    expect_error "learning rate must be finite and >= 0, got nan" "${quick[@]}" --resume bad.safetensors ;;
  checkpoint_of_another_optimizer)
    make_checkpoint --optimizer sgd
    expect_error "saved by SGD, not Adam" "${quick[@]}" --optimizer adam --resume ck/checkpoint.safetensors ;;
  checkpoint_of_another_model)  # refused from the metadata, before anything is loaded
    make_checkpoint --model mlp
    expect_error "was written with model mlp, not cnn" "${quick[@]}" --model cnn --resume ck/checkpoint.safetensors ;;
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
    expect_error "--log-steps /nonexistent-dir/steps.csv: cannot write there" "${quick[@]}" \
      --log-steps /nonexistent-dir/steps.csv ;;
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
  *)
    fail "unknown case" ;;
esac
echo "ok: $case"
