module @capstep_decode_gpt2_last attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<6x8xf32> loc("pos_emb"), %arg2: tensor<8xf32> loc("blocks.0.attn_norm"), %arg3: tensor<8xf32> loc("blocks.0.attn_norm_bias"), %arg4: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg5: tensor<8xf32> loc("blocks.0.attn.bq"), %arg6: tensor<8x8xf32> loc("blocks.0.attn.wk"), %arg7: tensor<8xf32> loc("blocks.0.attn.bk"), %arg8: tensor<8x8xf32> loc("blocks.0.attn.wv"), %arg9: tensor<8xf32> loc("blocks.0.attn.bv"), %arg10: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg11: tensor<8xf32> loc("blocks.0.attn.bo"), %arg12: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg13: tensor<8xf32> loc("blocks.0.mlp_norm_bias"), %arg14: tensor<8x16xf32> loc("blocks.0.mlp.w1"), %arg15: tensor<16xf32> loc("blocks.0.mlp.b1"), %arg16: tensor<16x8xf32> loc("blocks.0.mlp.w2"), %arg17: tensor<8xf32> loc("blocks.0.mlp.b2"), %arg18: tensor<8xf32> loc("final_norm"), %arg19: tensor<8xf32> loc("final_norm_bias"), %arg20: tensor<1x1xi32> loc("token"), %arg21: tensor<1xi32> loc("pos"), %arg22: tensor<1x2x6x4xf32> loc("k_cache.0"), %arg23: tensor<1x2x6x4xf32> loc("v_cache.0")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x2x1x4xf32> {jax.result_info = "k.0"}, tensor<1x2x1x4xf32> {jax.result_info = "v.0"}) {
    %0 = "stablehlo.gather"(%arg1, %arg21) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<6x8xf32>, tensor<1xi32>) -> tensor<1x8xf32>
    %1 = "stablehlo.gather"(%arg0, %arg20) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x1xi32>) -> tensor<1x1x8xf32>
    %2 = stablehlo.broadcast_in_dim %0, dims = [1, 2] : (tensor<1x8xf32>) -> tensor<1x1x8xf32>
    %3 = stablehlo.add %1, %2 : tensor<1x1x8xf32>
    %4 = stablehlo.iota dim = 0 : tensor<6xi32>
    %5 = stablehlo.broadcast_in_dim %arg21, dims = [0] : (tensor<1xi32>) -> tensor<6xi32>
    %6 = stablehlo.compare EQ, %4, %5, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %7 = stablehlo.broadcast_in_dim %6, dims = [2] : (tensor<6xi1>) -> tensor<1x2x6x4xi1>
    %8 = stablehlo.constant dense<0.000000e+00> : tensor<6xf32>
    %9 = stablehlo.constant dense<-1.000000e+09> : tensor<6xf32>
    %10 = stablehlo.compare GT, %4, %5, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %11 = stablehlo.select %10, %9, %8 : tensor<6xi1>, tensor<6xf32>
    %init12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %12 = stablehlo.reduce(%3 init: %init12) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %13 = stablehlo.reshape %12 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %14 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %15 = stablehlo.multiply %13, %14 : tensor<1x1x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %17 = stablehlo.subtract %3, %16 : tensor<1x1x8xf32>
    %18 = stablehlo.multiply %17, %17 : tensor<1x1x8xf32>
    %init19 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %19 = stablehlo.reduce(%18 init: %init19) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %20 = stablehlo.reshape %19 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %21 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %22 = stablehlo.multiply %20, %21 : tensor<1x1x1xf32>
    %23 = stablehlo.constant dense<1.000000e-05> : tensor<1x1x1xf32>
    %24 = stablehlo.add %22, %23 : tensor<1x1x1xf32>
    %25 = stablehlo.rsqrt %24 : tensor<1x1x1xf32>
    %26 = stablehlo.broadcast_in_dim %25, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %27 = stablehlo.multiply %17, %26 : tensor<1x1x8xf32>
    %28 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %29 = stablehlo.multiply %27, %28 : tensor<1x1x8xf32>
    %30 = stablehlo.broadcast_in_dim %arg3, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %31 = stablehlo.add %29, %30 : tensor<1x1x8xf32>
    %32 = stablehlo.dot_general %31, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %33 = stablehlo.broadcast_in_dim %arg9, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %34 = stablehlo.add %32, %33 : tensor<1x1x8xf32>
    %35 = stablehlo.reshape %34 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %36 = stablehlo.transpose %35, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %37 = stablehlo.dot_general %31, %arg6, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %38 = stablehlo.broadcast_in_dim %arg7, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %39 = stablehlo.add %37, %38 : tensor<1x1x8xf32>
    %40 = stablehlo.reshape %39 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %41 = stablehlo.transpose %40, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %42 = stablehlo.dot_general %31, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %43 = stablehlo.broadcast_in_dim %arg5, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %44 = stablehlo.add %42, %43 : tensor<1x1x8xf32>
    %45 = stablehlo.reshape %44 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %46 = stablehlo.transpose %45, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %47 = stablehlo.broadcast_in_dim %36, dims = [0, 1, 2, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
    %48 = stablehlo.select %7, %47, %arg23 : tensor<1x2x6x4xi1>, tensor<1x2x6x4xf32>
    %49 = stablehlo.broadcast_in_dim %41, dims = [0, 1, 2, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
    %50 = stablehlo.select %7, %49, %arg22 : tensor<1x2x6x4xi1>, tensor<1x2x6x4xf32>
    %51 = stablehlo.transpose %50, dims = [0, 1, 3, 2] : (tensor<1x2x6x4xf32>) -> tensor<1x2x4x6xf32>
    %52 = stablehlo.dot_general %46, %51, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x4xf32>, tensor<1x2x4x6xf32>) -> tensor<1x2x1x6xf32>
    %53 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x1x6xf32>
    %54 = stablehlo.multiply %52, %53 : tensor<1x2x1x6xf32>
    %55 = stablehlo.broadcast_in_dim %11, dims = [3] : (tensor<6xf32>) -> tensor<1x2x1x6xf32>
    %56 = stablehlo.add %54, %55 : tensor<1x2x1x6xf32>
    %init57 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %57 = stablehlo.reduce(%56 init: %init57) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %58 = stablehlo.broadcast_in_dim %57, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %59 = stablehlo.subtract %56, %58 : tensor<1x2x1x6xf32>
    %60 = stablehlo.exponential %59 : tensor<1x2x1x6xf32>
    %init61 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %61 = stablehlo.reduce(%60 init: %init61) applies stablehlo.add across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %62 = stablehlo.broadcast_in_dim %61, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %63 = stablehlo.divide %60, %62 : tensor<1x2x1x6xf32>
    %64 = stablehlo.dot_general %63, %48, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x1x4xf32>
    %65 = stablehlo.transpose %64, dims = [0, 2, 1, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x1x2x4xf32>
    %66 = stablehlo.reshape %65 : (tensor<1x1x2x4xf32>) -> tensor<1x1x8xf32>
    %67 = stablehlo.dot_general %66, %arg10, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %68 = stablehlo.broadcast_in_dim %arg11, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %69 = stablehlo.add %67, %68 : tensor<1x1x8xf32>
    %70 = stablehlo.add %3, %69 : tensor<1x1x8xf32>
    %init71 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %71 = stablehlo.reduce(%70 init: %init71) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %72 = stablehlo.reshape %71 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %73 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %74 = stablehlo.multiply %72, %73 : tensor<1x1x1xf32>
    %75 = stablehlo.broadcast_in_dim %74, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %76 = stablehlo.subtract %70, %75 : tensor<1x1x8xf32>
    %77 = stablehlo.multiply %76, %76 : tensor<1x1x8xf32>
    %init78 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %78 = stablehlo.reduce(%77 init: %init78) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %79 = stablehlo.reshape %78 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %80 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %81 = stablehlo.multiply %79, %80 : tensor<1x1x1xf32>
    %82 = stablehlo.constant dense<1.000000e-05> : tensor<1x1x1xf32>
    %83 = stablehlo.add %81, %82 : tensor<1x1x1xf32>
    %84 = stablehlo.rsqrt %83 : tensor<1x1x1xf32>
    %85 = stablehlo.broadcast_in_dim %84, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %86 = stablehlo.multiply %76, %85 : tensor<1x1x8xf32>
    %87 = stablehlo.broadcast_in_dim %arg12, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %88 = stablehlo.multiply %86, %87 : tensor<1x1x8xf32>
    %89 = stablehlo.broadcast_in_dim %arg13, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %90 = stablehlo.add %88, %89 : tensor<1x1x8xf32>
    %91 = stablehlo.dot_general %90, %arg14, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
    %92 = stablehlo.broadcast_in_dim %arg15, dims = [2] : (tensor<16xf32>) -> tensor<1x1x16xf32>
    %93 = stablehlo.add %91, %92 : tensor<1x1x16xf32>
    %94 = stablehlo.multiply %93, %93 : tensor<1x1x16xf32>
    %95 = stablehlo.multiply %94, %93 : tensor<1x1x16xf32>
    %96 = stablehlo.constant dense<4.471500e-02> : tensor<1x1x16xf32>
    %97 = stablehlo.multiply %95, %96 : tensor<1x1x16xf32>
    %98 = stablehlo.add %93, %97 : tensor<1x1x16xf32>
    %99 = stablehlo.constant dense<7.978846e-01> : tensor<1x1x16xf32>
    %100 = stablehlo.multiply %98, %99 : tensor<1x1x16xf32>
    %101 = stablehlo.tanh %100 : tensor<1x1x16xf32>
    %102 = stablehlo.constant dense<1.000000e+00> : tensor<1x1x16xf32>
    %103 = stablehlo.add %101, %102 : tensor<1x1x16xf32>
    %104 = stablehlo.constant dense<5.000000e-01> : tensor<1x1x16xf32>
    %105 = stablehlo.multiply %93, %104 : tensor<1x1x16xf32>
    %106 = stablehlo.multiply %105, %103 : tensor<1x1x16xf32>
    %107 = stablehlo.dot_general %106, %arg16, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x16xf32>, tensor<16x8xf32>) -> tensor<1x1x8xf32>
    %108 = stablehlo.broadcast_in_dim %arg17, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %109 = stablehlo.add %107, %108 : tensor<1x1x8xf32>
    %110 = stablehlo.add %70, %109 : tensor<1x1x8xf32>
    %init111 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %111 = stablehlo.reduce(%110 init: %init111) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %112 = stablehlo.reshape %111 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %113 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %114 = stablehlo.multiply %112, %113 : tensor<1x1x1xf32>
    %115 = stablehlo.broadcast_in_dim %114, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %116 = stablehlo.subtract %110, %115 : tensor<1x1x8xf32>
    %117 = stablehlo.multiply %116, %116 : tensor<1x1x8xf32>
    %init118 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %118 = stablehlo.reduce(%117 init: %init118) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %119 = stablehlo.reshape %118 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %120 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %121 = stablehlo.multiply %119, %120 : tensor<1x1x1xf32>
    %122 = stablehlo.constant dense<1.000000e-05> : tensor<1x1x1xf32>
    %123 = stablehlo.add %121, %122 : tensor<1x1x1xf32>
    %124 = stablehlo.rsqrt %123 : tensor<1x1x1xf32>
    %125 = stablehlo.broadcast_in_dim %124, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %126 = stablehlo.multiply %116, %125 : tensor<1x1x8xf32>
    %127 = stablehlo.broadcast_in_dim %arg18, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %128 = stablehlo.multiply %126, %127 : tensor<1x1x8xf32>
    %129 = stablehlo.broadcast_in_dim %arg19, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %130 = stablehlo.add %128, %129 : tensor<1x1x8xf32>
    %131 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<11x8xf32>) -> tensor<8x11xf32>
    %132 = stablehlo.dot_general %130, %131, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %132, %41, %36 : tensor<1x1x11xf32>, tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>
  }
}
