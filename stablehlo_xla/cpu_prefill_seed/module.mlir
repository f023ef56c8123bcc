module @capstep_prefill_seed attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<6x8xf32> loc("pos_emb"), %arg2: tensor<8xf32> loc("blocks.0.attn_norm"), %arg3: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg4: tensor<8x8xf32> loc("blocks.0.attn.wk"), %arg5: tensor<8x8xf32> loc("blocks.0.attn.wv"), %arg6: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg7: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg8: tensor<8x16xf32> loc("blocks.0.mlp.w1"), %arg9: tensor<16x8xf32> loc("blocks.0.mlp.w2"), %arg10: tensor<8xf32> loc("final_norm"), %arg11: tensor<8x11xf32> loc("head"), %arg12: tensor<1x5xi32> loc("tokens")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x2x5x4xf32> {jax.result_info = "k.0"}, tensor<1x2x5x4xf32> {jax.result_info = "v.0"}) {
    %0 = stablehlo.iota dim = 0 : tensor<5xi32>
    %1 = "stablehlo.gather"(%arg1, %0) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<6x8xf32>, tensor<5xi32>) -> tensor<5x8xf32>
    %2 = "stablehlo.gather"(%arg0, %arg12) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x5xi32>) -> tensor<1x5x8xf32>
    %3 = stablehlo.broadcast_in_dim %1, dims = [1, 2] : (tensor<5x8xf32>) -> tensor<1x5x8xf32>
    %4 = stablehlo.add %2, %3 : tensor<1x5x8xf32>
    %5 = stablehlo.multiply %4, %4 : tensor<1x5x8xf32>
    %init6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %6 = stablehlo.reduce(%5 init: %init6) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %7 = stablehlo.constant dense<1.250000e-01> : tensor<1x5xf32>
    %8 = stablehlo.multiply %6, %7 : tensor<1x5xf32>
    %9 = stablehlo.constant dense<1.000000e-05> : tensor<1x5xf32>
    %10 = stablehlo.add %8, %9 : tensor<1x5xf32>
    %11 = stablehlo.rsqrt %10 : tensor<1x5xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1] : (tensor<1x5xf32>) -> tensor<1x5x8xf32>
    %13 = stablehlo.multiply %4, %12 : tensor<1x5x8xf32>
    %14 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %15 = stablehlo.multiply %13, %14 : tensor<1x5x8xf32>
    %16 = stablehlo.dot_general %15, %arg5, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %17 = stablehlo.reshape %16 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %18 = stablehlo.transpose %17, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %19 = stablehlo.dot_general %15, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %20 = stablehlo.reshape %19 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %21 = stablehlo.transpose %20, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %22 = stablehlo.dot_general %15, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %23 = stablehlo.reshape %22 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %24 = stablehlo.transpose %23, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %25 = stablehlo.dot_general %24, %21, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x5xf32>
    %26 = stablehlo.iota dim = 0 : tensor<5x5xi32>
    %27 = stablehlo.iota dim = 1 : tensor<5x5xi32>
    %28 = stablehlo.compare GT, %27, %26, SIGNED : (tensor<5x5xi32>, tensor<5x5xi32>) -> tensor<5x5xi1>
    %29 = stablehlo.constant dense<0.000000e+00> : tensor<5x5xf32>
    %30 = stablehlo.constant dense<-1.000000e+09> : tensor<5x5xf32>
    %31 = stablehlo.select %28, %30, %29 : tensor<5x5xi1>, tensor<5x5xf32>
    %32 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x5x5xf32>
    %33 = stablehlo.multiply %25, %32 : tensor<1x2x5x5xf32>
    %34 = stablehlo.broadcast_in_dim %31, dims = [2, 3] : (tensor<5x5xf32>) -> tensor<1x2x5x5xf32>
    %35 = stablehlo.add %33, %34 : tensor<1x2x5x5xf32>
    %init36 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %36 = stablehlo.reduce(%35 init: %init36) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %37 = stablehlo.broadcast_in_dim %36, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %38 = stablehlo.subtract %35, %37 : tensor<1x2x5x5xf32>
    %39 = stablehlo.exponential %38 : tensor<1x2x5x5xf32>
    %init40 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %40 = stablehlo.reduce(%39 init: %init40) applies stablehlo.add across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %41 = stablehlo.broadcast_in_dim %40, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %42 = stablehlo.divide %39, %41 : tensor<1x2x5x5xf32>
    %43 = stablehlo.dot_general %42, %18, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
    %44 = stablehlo.transpose %43, dims = [0, 2, 1, 3] : (tensor<1x2x5x4xf32>) -> tensor<1x5x2x4xf32>
    %45 = stablehlo.reshape %44 : (tensor<1x5x2x4xf32>) -> tensor<1x5x8xf32>
    %46 = stablehlo.dot_general %45, %arg6, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %47 = stablehlo.add %4, %46 : tensor<1x5x8xf32>
    %48 = stablehlo.multiply %47, %47 : tensor<1x5x8xf32>
    %init49 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %49 = stablehlo.reduce(%48 init: %init49) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %50 = stablehlo.constant dense<1.250000e-01> : tensor<1x5xf32>
    %51 = stablehlo.multiply %49, %50 : tensor<1x5xf32>
    %52 = stablehlo.constant dense<1.000000e-05> : tensor<1x5xf32>
    %53 = stablehlo.add %51, %52 : tensor<1x5xf32>
    %54 = stablehlo.rsqrt %53 : tensor<1x5xf32>
    %55 = stablehlo.broadcast_in_dim %54, dims = [0, 1] : (tensor<1x5xf32>) -> tensor<1x5x8xf32>
    %56 = stablehlo.multiply %47, %55 : tensor<1x5x8xf32>
    %57 = stablehlo.broadcast_in_dim %arg7, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %58 = stablehlo.multiply %56, %57 : tensor<1x5x8xf32>
    %59 = stablehlo.dot_general %58, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x16xf32>) -> tensor<1x5x16xf32>
    %60 = stablehlo.multiply %59, %59 : tensor<1x5x16xf32>
    %61 = stablehlo.multiply %60, %59 : tensor<1x5x16xf32>
    %62 = stablehlo.constant dense<4.471500e-02> : tensor<1x5x16xf32>
    %63 = stablehlo.multiply %61, %62 : tensor<1x5x16xf32>
    %64 = stablehlo.add %59, %63 : tensor<1x5x16xf32>
    %65 = stablehlo.constant dense<7.978846e-01> : tensor<1x5x16xf32>
    %66 = stablehlo.multiply %64, %65 : tensor<1x5x16xf32>
    %67 = stablehlo.tanh %66 : tensor<1x5x16xf32>
    %68 = stablehlo.constant dense<1.000000e+00> : tensor<1x5x16xf32>
    %69 = stablehlo.add %67, %68 : tensor<1x5x16xf32>
    %70 = stablehlo.constant dense<5.000000e-01> : tensor<1x5x16xf32>
    %71 = stablehlo.multiply %59, %70 : tensor<1x5x16xf32>
    %72 = stablehlo.multiply %71, %69 : tensor<1x5x16xf32>
    %73 = stablehlo.dot_general %72, %arg9, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x16xf32>, tensor<16x8xf32>) -> tensor<1x5x8xf32>
    %74 = stablehlo.add %47, %73 : tensor<1x5x8xf32>
    %75 = stablehlo.slice %74 [0:1, 4:5, 0:8] : (tensor<1x5x8xf32>) -> tensor<1x1x8xf32>
    %76 = stablehlo.multiply %75, %75 : tensor<1x1x8xf32>
    %init77 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %77 = stablehlo.reduce(%76 init: %init77) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %78 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %79 = stablehlo.multiply %77, %78 : tensor<1x1xf32>
    %80 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %81 = stablehlo.add %79, %80 : tensor<1x1xf32>
    %82 = stablehlo.rsqrt %81 : tensor<1x1xf32>
    %83 = stablehlo.broadcast_in_dim %82, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %84 = stablehlo.multiply %75, %83 : tensor<1x1x8xf32>
    %85 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %86 = stablehlo.multiply %84, %85 : tensor<1x1x8xf32>
    %87 = stablehlo.dot_general %86, %arg11, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %87, %21, %18 : tensor<1x1x11xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>
  }
}
