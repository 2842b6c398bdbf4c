// Everything in hg::data: datasets (your own, TensorDataset, CSV, (Fashion-)MNIST, CIFAR-10), the
// transforms, DataLoader, DistributedSampler and the IDX reader.
#pragma once
#include "data/cifar.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/tensor_dataset.h"
#include "data/text.h"
#include "data/transforms.h"
