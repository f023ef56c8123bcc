module @capstep_decode_seed_pos3 attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<6x8xf32> loc("pos_emb"), %arg2: tensor<8xf32> loc("blocks.0.attn_norm"), %arg3: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg4: tensor<8x8xf32> loc("blocks.0.attn.wk"), %arg5: tensor<8x8xf32> loc("blocks.0.attn.wv"), %arg6: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg7: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg8: tensor<8x16xf32> loc("blocks.0.mlp.w1"), %arg9: tensor<16x8xf32> loc("blocks.0.mlp.w2"), %arg10: tensor<8xf32> loc("final_norm"), %arg11: tensor<8x11xf32> loc("head"), %arg12: tensor<1x1xi32> loc("token"), %arg13: tensor<1xi32> loc("pos"), %arg14: tensor<1x2x6x4xf32> loc("k_cache.0"), %arg15: tensor<1x2x6x4xf32> loc("v_cache.0")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x2x1x4xf32> {jax.result_info = "k.0"}, tensor<1x2x1x4xf32> {jax.result_info = "v.0"}) {
    %0 = "stablehlo.gather"(%arg1, %arg13) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<6x8xf32>, tensor<1xi32>) -> tensor<1x8xf32>
    %1 = "stablehlo.gather"(%arg0, %arg12) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x1xi32>) -> tensor<1x1x8xf32>
    %2 = stablehlo.broadcast_in_dim %0, dims = [1, 2] : (tensor<1x8xf32>) -> tensor<1x1x8xf32>
    %3 = stablehlo.add %1, %2 : tensor<1x1x8xf32>
    %4 = stablehlo.iota dim = 0 : tensor<6xi32>
    %5 = stablehlo.broadcast_in_dim %arg13, dims = [0] : (tensor<1xi32>) -> tensor<6xi32>
    %6 = stablehlo.compare EQ, %4, %5, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %7 = stablehlo.broadcast_in_dim %6, dims = [2] : (tensor<6xi1>) -> tensor<1x2x6x4xi1>
    %8 = stablehlo.constant dense<0.000000e+00> : tensor<6xf32>
    %9 = stablehlo.constant dense<-1.000000e+09> : tensor<6xf32>
    %10 = stablehlo.compare GT, %4, %5, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %11 = stablehlo.select %10, %9, %8 : tensor<6xi1>, tensor<6xf32>
    %12 = stablehlo.multiply %3, %3 : tensor<1x1x8xf32>
    %init13 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %13 = stablehlo.reduce(%12 init: %init13) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %14 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %15 = stablehlo.multiply %13, %14 : tensor<1x1xf32>
    %16 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %17 = stablehlo.add %15, %16 : tensor<1x1xf32>
    %18 = stablehlo.rsqrt %17 : tensor<1x1xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %20 = stablehlo.multiply %3, %19 : tensor<1x1x8xf32>
    %21 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %22 = stablehlo.multiply %20, %21 : tensor<1x1x8xf32>
    %23 = stablehlo.dot_general %22, %arg5, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %24 = stablehlo.reshape %23 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %25 = stablehlo.transpose %24, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %26 = stablehlo.dot_general %22, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %27 = stablehlo.reshape %26 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %28 = stablehlo.transpose %27, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %29 = stablehlo.dot_general %22, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %30 = stablehlo.reshape %29 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %31 = stablehlo.transpose %30, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %32 = stablehlo.broadcast_in_dim %25, dims = [0, 1, 2, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
    %33 = stablehlo.select %7, %32, %arg15 : tensor<1x2x6x4xi1>, tensor<1x2x6x4xf32>
    %34 = stablehlo.broadcast_in_dim %28, dims = [0, 1, 2, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
    %35 = stablehlo.select %7, %34, %arg14 : tensor<1x2x6x4xi1>, tensor<1x2x6x4xf32>
    %36 = stablehlo.transpose %35, dims = [0, 1, 3, 2] : (tensor<1x2x6x4xf32>) -> tensor<1x2x4x6xf32>
    %37 = stablehlo.dot_general %31, %36, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x4xf32>, tensor<1x2x4x6xf32>) -> tensor<1x2x1x6xf32>
    %38 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x1x6xf32>
    %39 = stablehlo.multiply %37, %38 : tensor<1x2x1x6xf32>
    %40 = stablehlo.broadcast_in_dim %11, dims = [3] : (tensor<6xf32>) -> tensor<1x2x1x6xf32>
    %41 = stablehlo.add %39, %40 : tensor<1x2x1x6xf32>
    %init42 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %42 = stablehlo.reduce(%41 init: %init42) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %43 = stablehlo.broadcast_in_dim %42, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %44 = stablehlo.subtract %41, %43 : tensor<1x2x1x6xf32>
    %45 = stablehlo.exponential %44 : tensor<1x2x1x6xf32>
    %init46 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %46 = stablehlo.reduce(%45 init: %init46) applies stablehlo.add across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %47 = stablehlo.broadcast_in_dim %46, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %48 = stablehlo.divide %45, %47 : tensor<1x2x1x6xf32>
    %49 = stablehlo.dot_general %48, %33, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x1x4xf32>
    %50 = stablehlo.transpose %49, dims = [0, 2, 1, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x1x2x4xf32>
    %51 = stablehlo.reshape %50 : (tensor<1x1x2x4xf32>) -> tensor<1x1x8xf32>
    %52 = stablehlo.dot_general %51, %arg6, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %53 = stablehlo.add %3, %52 : tensor<1x1x8xf32>
    %54 = stablehlo.multiply %53, %53 : tensor<1x1x8xf32>
    %init55 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %55 = stablehlo.reduce(%54 init: %init55) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %56 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %57 = stablehlo.multiply %55, %56 : tensor<1x1xf32>
    %58 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %59 = stablehlo.add %57, %58 : tensor<1x1xf32>
    %60 = stablehlo.rsqrt %59 : tensor<1x1xf32>
    %61 = stablehlo.broadcast_in_dim %60, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %62 = stablehlo.multiply %53, %61 : tensor<1x1x8xf32>
    %63 = stablehlo.broadcast_in_dim %arg7, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %64 = stablehlo.multiply %62, %63 : tensor<1x1x8xf32>
    %65 = stablehlo.dot_general %64, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
    %66 = stablehlo.multiply %65, %65 : tensor<1x1x16xf32>
    %67 = stablehlo.multiply %66, %65 : tensor<1x1x16xf32>
    %68 = stablehlo.constant dense<4.471500e-02> : tensor<1x1x16xf32>
    %69 = stablehlo.multiply %67, %68 : tensor<1x1x16xf32>
    %70 = stablehlo.add %65, %69 : tensor<1x1x16xf32>
    %71 = stablehlo.constant dense<7.978846e-01> : tensor<1x1x16xf32>
    %72 = stablehlo.multiply %70, %71 : tensor<1x1x16xf32>
    %73 = stablehlo.tanh %72 : tensor<1x1x16xf32>
    %74 = stablehlo.constant dense<1.000000e+00> : tensor<1x1x16xf32>
    %75 = stablehlo.add %73, %74 : tensor<1x1x16xf32>
    %76 = stablehlo.constant dense<5.000000e-01> : tensor<1x1x16xf32>
    %77 = stablehlo.multiply %65, %76 : tensor<1x1x16xf32>
    %78 = stablehlo.multiply %77, %75 : tensor<1x1x16xf32>
    %79 = stablehlo.dot_general %78, %arg9, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x16xf32>, tensor<16x8xf32>) -> tensor<1x1x8xf32>
    %80 = stablehlo.add %53, %79 : tensor<1x1x8xf32>
    %81 = stablehlo.multiply %80, %80 : tensor<1x1x8xf32>
    %init82 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %82 = stablehlo.reduce(%81 init: %init82) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %83 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %84 = stablehlo.multiply %82, %83 : tensor<1x1xf32>
    %85 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %86 = stablehlo.add %84, %85 : tensor<1x1xf32>
    %87 = stablehlo.rsqrt %86 : tensor<1x1xf32>
    %88 = stablehlo.broadcast_in_dim %87, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %89 = stablehlo.multiply %80, %88 : tensor<1x1x8xf32>
    %90 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %91 = stablehlo.multiply %89, %90 : tensor<1x1x8xf32>
    %92 = stablehlo.dot_general %91, %arg11, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %92, %28, %25 : tensor<1x1x11xf32>, tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>
  }
}
